@F064
Feature: Per-partition watermarks
  One watermark per partition of each source (a Kafka topic's partitions), so
  one slow or silent partition holds the job back only until it is marked idle
  or its idle timeout passes; the combined watermark is the minimum over the
  active partitions and never goes back. Clauses: spec/partitioned_watermarks.md.

  Times are milliseconds. A partition is written S/P (source/partition).
  Batches are numbered from 0 as in the output tables: each When step that
  adds items is one new batch unless it says "in the same batch" (see
  harness/steps.py). The processing clock starts at 0 and moves only with
  "the processing clock advances to". An empty cell is a missing field; "-"
  in an expected table is null (no watermark, no core).

  Rule: The combined watermark is the minimum over the active partitions

    @F064-R2 @F064-R3 @F064-R4 @F064-R6 @F064-R9 @F064-R16 @TR-1 @TR-8
    Scenario: One idle partition no longer holds back the others
      The seed's worked example: a topic with 4 partitions.
      Given partitioned watermarks with the default configuration
      When source 0 is registered with 4 partitions
      And these watermarks arrive in the next batch:
        | source | partition | time |
        | 0      | 0         | 5000 |
        | 0      | 1         | 3000 |
        | 0      | 2         | 4000 |
        | 0      | 3         | 4500 |
      Then the combined watermark is 3000
      And the partition watermarks are:
        | source | partition | watermark | state  | core |
        | 0      | 0         | 5000      | active | -    |
        | 0      | 1         | 3000      | active | -    |
        | 0      | 2         | 4000      | active | -    |
        | 0      | 3         | 4500      | active | -    |
      When partition 0/1 is marked idle
      Then the combined watermark is 4000
      And the partition watermarks are:
        | source | partition | watermark | state  |
        | 0      | 0         | 5000      | active |
        | 0      | 1         | 3000      | idle   |
        | 0      | 2         | 4000      | active |
        | 0      | 3         | 4500      | active |
      And the source watermarks are:
        | source | watermark | active_partitions |
        | 0      | 4000      | 3                 |
      And the progress is:
        | batch | combined_watermark | total_partitions | active_partitions | idle_partitions | watermark_advances | rebalances |
        | 0     | -                  | 4                | 4                 | 0               | 0                  | 0          |
        | 1     | 3000               | 4                | 4                 | 0               | 1                  | 0          |
        | 2     | 4000               | 4                | 3                 | 1               | 2                  | 0          |

    @F064-R3 @F064-R6 @F064-R8 @F064-R14
    Scenario: A partition that has not reported yet holds the combined watermark back
      Given partitioned watermarks with the default configuration
      When source 0 is registered with 2 partitions
      And partition 0/0 reports watermark 5000
      Then the combined watermark is none
      And the partition watermarks are:
        | source | partition | watermark | state  |
        | 0      | 0         | 5000      | active |
        | 0      | 1         | -         | active |
      And the source watermarks are:
        | source | watermark | active_partitions |
        | 0      | -         | 2                 |
      When partition 0/1 reports watermark 1000
      Then the combined watermark is 1000
      And the source watermarks are:
        | source | watermark | active_partitions |
        | 0      | 1000      | 2                 |

    @F064-R4 @F064-R5 @F064-R16 @F064-R21
    Scenario: A partition's watermark is the highest it has been given and never goes back
      Given partitioned watermarks with the default configuration
      When source 0 is registered with 1 partition
      And these items arrive in the next batch:
        | kind      | source | partition | time |
        | watermark | 0      | 0         | 5000 |
        | watermark | 0      | 0         | 3000 |
      Then the partition watermarks are:
        | source | partition | watermark |
        | 0      | 0         | 5000      |
      When these events arrive in the next batch:
        | source | partition | event_time |
        | 0      | 0         | 2000       |
      And partition 0/0 reports watermark 4000 in the same batch
      Then the partition watermarks are:
        | source | partition | watermark | state  |
        | 0      | 0         | 5000      | active |
      And the partition changes in the last batch are:
        | batch | source | partition | watermark | state | core |
      And the combined watermark is 5000
      And the metrics are:
        | metric             | value |
        | watermark_advances | 1     |

    @F064-R5 @F064-R24 @F064-R6
    Scenario: An event moves its partition's watermark to its event time minus the max lateness
      The seed's example again, driven by events with a max lateness of 1000 ms.
      Given partitioned watermarks with a max lateness of 1000 ms
      When source 0 is registered with 4 partitions
      And these events arrive in the next batch:
        | source | partition | event_time |
        | 0      | 0         | 6000       |
        | 0      | 1         | 4000       |
        | 0      | 2         | 5000       |
        | 0      | 3         | 5500       |
      Then the partition watermarks are:
        | source | partition | watermark |
        | 0      | 0         | 5000      |
        | 0      | 1         | 3000      |
        | 0      | 2         | 4000      |
        | 0      | 3         | 4500      |
      And the combined watermark is 3000
      When partition 0/1 is marked idle
      Then the combined watermark is 4000

    @F064-R5 @F064-R16 @TR-2
    Scenario: The watermark of an event saturates at the lower bound of time
      A first watermark that saturates counts as an advance; a later event whose
      watermark also saturates does not.
      Given partitioned watermarks with a max lateness of 1000 ms
      When source 0 is registered with 1 partition
      And these events arrive in the next batch:
        | source | partition | event_time  |
        | 0      | 0         | I64_MIN + 5 |
      Then the partition watermarks are:
        | source | partition | watermark |
        | 0      | 0         | I64_MIN   |
      And the combined watermark is I64_MIN
      When these events arrive in the next batch:
        | source | partition | event_time    |
        | 0      | 0         | I64_MIN + 500 |
      Then the combined watermark is I64_MIN
      And the metrics are:
        | metric             | value |
        | watermark_advances | 1     |

    @F064-R6 @F064-R9 @F064-R14
    Scenario Outline: With every partition idle the combined watermark is the highest partition watermark, in whatever order they went idle
      Given partitioned watermarks with the default configuration
      When source 0 is registered with 3 partitions
      And these watermarks arrive in the next batch:
        | source | partition | time  |
        | 0      | 0         | 10000 |
        | 0      | 1         | 30000 |
        | 0      | 2         | 20000 |
      And partition 0/<first> is marked idle
      And partition 0/<second> is marked idle
      And partition 0/<third> is marked idle
      Then the combined watermark is 30000
      And the source watermarks are:
        | source | watermark | active_partitions |
        | 0      | 30000     | 0                 |
      And the partition watermarks are:
        | source | partition | watermark | state |
        | 0      | 0         | 10000     | idle  |
        | 0      | 1         | 30000     | idle  |
        | 0      | 2         | 20000     | idle  |
      And the metrics are:
        | metric            | value |
        | total_partitions  | 3     |
        | active_partitions | 0     |
        | idle_partitions   | 3     |

      Examples:
        | first | second | third |
        | 0     | 1      | 2     |
        | 2     | 1      | 0     |
        | 1     | 0      | 2     |

    @F064-R6 @F064-R4 @F064-R9
    Scenario: With every partition idle and none reported there is no combined watermark, and a report reactivates its partition
      Given partitioned watermarks with the default configuration
      When source 0 is registered with 2 partitions
      And partition 0/0 is marked idle
      And partition 0/1 is marked idle in the same batch
      Then the combined watermark is none
      And the metrics are:
        | metric            | value |
        | active_partitions | 0     |
        | idle_partitions   | 2     |
      When partition 0/1 reports watermark 500
      Then the combined watermark is 500
      And the partition watermarks are:
        | source | partition | watermark | state  |
        | 0      | 0         | -         | idle   |
        | 0      | 1         | 500       | active |
      And the source watermarks are:
        | source | watermark | active_partitions |
        | 0      | 500       | 1                 |

    @F064-R7 @F064-R4 @F064-R14 @F064-R21
    Scenario: A partition that resumes after idling is kept, does not move the combined watermark back, and holds it again
      The combined watermark only rises; a source's watermark is read from the
      current state and may go down.
      Given partitioned watermarks with the default configuration
      When source 0 is registered with 2 partitions
      And these watermarks arrive in the next batch:
        | source | partition | time  |
        | 0      | 0         | 10000 |
        | 0      | 1         | 2000  |
      And partition 0/1 is marked idle
      Then the combined watermark is 10000
      When partition 0/1 reports watermark 3000
      Then the combined watermark is 10000
      And the partition watermarks are:
        | source | partition | watermark | state  |
        | 0      | 0         | 10000     | active |
        | 0      | 1         | 3000      | active |
      And the source watermarks are:
        | source | watermark | active_partitions |
        | 0      | 3000      | 2                 |
      When partition 0/0 reports watermark 20000
      Then the combined watermark is 10000
      When partition 0/1 reports watermark 15000
      Then the combined watermark is 15000
      And the progress is:
        | batch | combined_watermark | watermark_advances |
        | 0     | -                  | 0                  |
        | 1     | 2000               | 1                  |
        | 2     | 10000              | 2                  |
        | 3     | 10000              | 2                  |
        | 4     | 10000              | 2                  |
        | 5     | 15000              | 3                  |
      And the source changes are:
        | batch | source | watermark | active_partitions |
        | 0     | 0      | -         | 2                 |
        | 1     | 0      | 2000      | 2                 |
        | 2     | 0      | 10000     | 1                 |
        | 3     | 0      | 3000      | 2                 |
        | 5     | 0      | 15000     | 2                 |

  Rule: Idle partitions

    @F064-R8 @F064-R11 @F064-R3
    Scenario: A silent partition stalls the whole job until its idle timeout, counted from its registration
      The timeout fires only when it is strictly exceeded: at 1000 ms after the
      registration the silent partition still holds everything back, at 1001 ms it is idle.
      Given partitioned watermarks with an idle timeout of 1000 ms
      When source 0 is registered with 2 partitions
      And the processing clock advances to 600 ms
      And partition 0/0 reports watermark 5000
      And the processing clock advances to 1000 ms
      Then the combined watermark is none
      And the partition watermarks are:
        | source | partition | watermark | state  |
        | 0      | 0         | 5000      | active |
        | 0      | 1         | -         | active |
      When the processing clock advances to 1001 ms
      Then the combined watermark is 5000
      And the partition watermarks are:
        | source | partition | watermark | state  |
        | 0      | 0         | 5000      | active |
        | 0      | 1         | -         | idle   |
      And the metrics are:
        | metric             | value |
        | active_partitions  | 1     |
        | idle_partitions    | 1     |
        | watermark_advances | 1     |

    @F064-R11 @F064-R4 @F064-R6
    Scenario: A partition's idle timeout counts from its latest report on the processing clock
      Given partitioned watermarks with an idle timeout of 1000 ms
      When source 0 is registered with 2 partitions
      And these watermarks arrive in the next batch:
        | source | partition | time |
        | 0      | 0         | 1000 |
        | 0      | 1         | 2000 |
      And the processing clock advances to 800 ms
      And partition 0/1 reports watermark 3000
      And the processing clock advances to 1000 ms
      Then the combined watermark is 1000
      And the partition watermarks are:
        | source | partition | watermark | state  |
        | 0      | 0         | 1000      | active |
        | 0      | 1         | 3000      | active |
      When the processing clock advances to 1001 ms
      Then the combined watermark is 3000
      And the partition watermarks are:
        | source | partition | watermark | state  |
        | 0      | 0         | 1000      | idle   |
        | 0      | 1         | 3000      | active |
      When the processing clock advances to 1800 ms
      Then the partition watermarks are:
        | source | partition | watermark | state  |
        | 0      | 0         | 1000      | idle   |
        | 0      | 1         | 3000      | active |
      When the processing clock advances to 1801 ms
      Then the partition watermarks are:
        | source | partition | watermark | state |
        | 0      | 0         | 1000      | idle  |
        | 0      | 1         | 3000      | idle  |
      And the combined watermark is 3000

    @F064-R10 @F064-R11 @F064-R7 @F064-R16
    Scenario: Marking a partition active keeps its watermark and restarts its idle timeout
      Marking active does not lower the combined watermark, even though the
      reactivated partition is the slowest.
      Given partitioned watermarks with an idle timeout of 1000 ms
      When source 0 is registered with 2 partitions
      And these watermarks arrive in the next batch:
        | source | partition | time |
        | 0      | 0         | 100  |
        | 0      | 1         | 200  |
      And the processing clock advances to 500 ms
      And partition 0/0 is marked idle
      And the processing clock advances to 900 ms
      And partition 0/0 is marked active
      And the processing clock advances to 1001 ms
      Then the partition watermarks are:
        | source | partition | watermark | state  |
        | 0      | 0         | 100       | active |
        | 0      | 1         | 200       | idle   |
      When the processing clock advances to 1900 ms
      And the processing clock advances to 1901 ms
      Then the progress is:
        | batch | combined_watermark | total_partitions | active_partitions | idle_partitions | watermark_advances |
        | 0     | -                  | 2                | 2                 | 0               | 0                  |
        | 1     | 100                | 2                | 2                 | 0               | 1                  |
        | 2     | 100                | 2                | 2                 | 0               | 1                  |
        | 3     | 200                | 2                | 1                 | 1               | 2                  |
        | 4     | 200                | 2                | 1                 | 1               | 2                  |
        | 5     | 200                | 2                | 2                 | 0               | 2                  |
        | 6     | 200                | 2                | 1                 | 1               | 2                  |
        | 7     | 200                | 2                | 1                 | 1               | 2                  |
        | 8     | 200                | 2                | 0                 | 2               | 2                  |

  Rule: Sources and rebalancing

    @F064-R12 @F064-R8 @F064-R3 @F064-R7 @F064-R16
    Scenario: A partition added by a rebalance holds the combined watermark until it reports
      Given partitioned watermarks with the default configuration
      When source 0 is registered with 2 partitions
      And these watermarks arrive in the next batch:
        | source | partition | time |
        | 0      | 0         | 5000 |
        | 0      | 1         | 6000 |
      And partition 0/2 is added
      Then the combined watermark is 5000
      And the partition watermarks are:
        | source | partition | watermark | state  | core |
        | 0      | 0         | 5000      | active | -    |
        | 0      | 1         | 6000      | active | -    |
        | 0      | 2         | -         | active | -    |
      When these watermarks arrive in the next batch:
        | source | partition | time |
        | 0      | 0         | 9000 |
        | 0      | 1         | 8000 |
      Then the combined watermark is 5000
      When partition 0/2 reports watermark 7000
      Then the combined watermark is 7000
      And the metrics are:
        | metric             | value |
        | total_partitions   | 3     |
        | watermark_advances | 2     |
        | rebalances         | 1     |

    @F064-R12 @F064-R3 @F064-R11
    Scenario: An added partition's idle timeout counts from when it was added
      Given partitioned watermarks with an idle timeout of 1000 ms
      When source 0 is registered with 1 partition
      And partition 0/0 reports watermark 5000
      And the processing clock advances to 800 ms
      And partition 0/1 is added
      And partition 0/0 reports watermark 6000 in the same batch
      And the processing clock advances to 1500 ms
      And partition 0/0 reports watermark 7000
      And the processing clock advances to 1800 ms
      Then the combined watermark is 5000
      And the partition watermarks are:
        | source | partition | watermark | state  |
        | 0      | 0         | 7000      | active |
        | 0      | 1         | -         | active |
      When the processing clock advances to 1801 ms
      Then the combined watermark is 7000
      And the partition watermarks are:
        | source | partition | watermark | state  |
        | 0      | 0         | 7000      | active |
        | 0      | 1         | -         | idle   |

    @F064-R13 @F064-R16 @F064-R21 @F064-R7
    Scenario: Removing a partition re-evaluates the combined watermark, and removing an untracked one is a no-op
      Given partitioned watermarks with the default configuration
      When source 0 is registered with 3 partitions
      And these watermarks arrive in the next batch:
        | source | partition | time |
        | 0      | 0         | 1000 |
        | 0      | 1         | 5000 |
        | 0      | 2         | 3000 |
      And partition 0/0 is removed
      Then the combined watermark is 3000
      And partition 0/0 is not tracked
      And the partition watermarks are:
        | source | partition | watermark |
        | 0      | 1         | 5000      |
        | 0      | 2         | 3000      |
      And the partition changes in the last batch are:
        | batch | source | partition | watermark | state   | core |
        | 2     | 0      | 0         | -         | removed | -    |
      And the metrics are:
        | metric             | value |
        | total_partitions   | 2     |
        | watermark_advances | 2     |
        | rebalances         | 1     |
      When these items arrive in the next batch:
        | kind             | source | partition |
        | remove_partition | 0      | 0         |
        | remove_partition | 0      | 7         |
        | remove_partition | 5      | 0         |
      Then there are no errors
      And the metrics are:
        | metric     | value |
        | rebalances | 1     |
      When partition 0/0 is added
      Then the combined watermark is 3000
      And the partition watermarks are:
        | source | partition | watermark |
        | 0      | 0         | -         |
        | 0      | 1         | 5000      |
        | 0      | 2         | 3000      |
      And the source watermarks are:
        | source | watermark | active_partitions |
        | 0      | -         | 3                 |
      And the metrics are:
        | metric     | value |
        | rebalances | 2     |

    @F064-R13 @F064-R8
    Scenario: Removing a partition that never reported releases the combined watermark
      Given partitioned watermarks with the default configuration
      When source 0 is registered with 2 partitions
      And partition 0/0 reports watermark 4000
      Then the combined watermark is none
      When partition 0/1 is removed
      Then the combined watermark is 4000
      And the metrics are:
        | metric             | value |
        | watermark_advances | 1     |
        | rebalances         | 1     |

    @F064-R2 @F064-R17 @F064-R16 @F064-R21
    Scenario: Registering a source again resizes it; the partitions that stay keep their state
      The first registration counts no rebalance; a re-registration counts one per
      partition added or removed, and one with the same size changes nothing.
      Given partitioned watermarks with the default configuration
      When source 0 is registered with 2 partitions
      And these watermarks arrive in the next batch:
        | source | partition | time |
        | 0      | 0         | 6000 |
        | 0      | 1         | 4000 |
      And partition 0/0 is assigned to core 1
      And source 0 is registered with 3 partitions
      Then the partition watermarks are:
        | source | partition | watermark | state  | core |
        | 0      | 0         | 6000      | active | 1    |
        | 0      | 1         | 4000      | active | -    |
        | 0      | 2         | -         | active | -    |
      And the combined watermark is 4000
      When partition 0/2 reports watermark 5000
      And source 0 is registered with 1 partition
      Then the partition watermarks are:
        | source | partition | watermark | state  | core |
        | 0      | 0         | 6000      | active | 1    |
      And the partition changes in the last batch are:
        | batch | source | partition | watermark | state   | core |
        | 5     | 0      | 1         | -         | removed | -    |
        | 5     | 0      | 2         | -         | removed | -    |
      And the combined watermark is 6000
      When source 0 is registered with 1 partition
      Then the progress is:
        | batch | combined_watermark | total_partitions | watermark_advances | rebalances |
        | 0     | -                  | 2                | 0                  | 0          |
        | 1     | 4000               | 2                | 1                  | 0          |
        | 2     | 4000               | 2                | 1                  | 0          |
        | 3     | 4000               | 3                | 1                  | 1          |
        | 4     | 4000               | 3                | 1                  | 1          |
        | 5     | 6000               | 1                | 2                  | 3          |
        | 6     | 6000               | 1                | 2                  | 3          |
      And the partition changes in the last batch are:
        | batch | source | partition | watermark | state | core |

    @F064-R14 @F064-R7 @F064-R2
    Scenario: A source's watermark is taken over its own partitions and may go down
      Given partitioned watermarks with the default configuration
      When source 0 is registered with 2 partitions
      And source 1 is registered with 1 partition in the same batch
      And these watermarks arrive in the next batch:
        | source | partition | time |
        | 0      | 0         | 1000 |
        | 0      | 1         | 3000 |
        | 1      | 0         | 2000 |
      Then the source watermarks are:
        | source | watermark | active_partitions |
        | 0      | 1000      | 2                 |
        | 1      | 2000      | 1                 |
      And the combined watermark is 1000
      When partition 0/0 is marked idle
      Then the source watermarks are:
        | source | watermark | active_partitions |
        | 0      | 3000      | 1                 |
        | 1      | 2000      | 1                 |
      And the combined watermark is 2000
      When source 2 is registered with 0 partitions
      Then the source watermarks are:
        | source | watermark | active_partitions |
        | 0      | 3000      | 1                 |
        | 1      | 2000      | 1                 |
        | 2      | -         | 0                 |
      And the combined watermark is 2000
      When partition 0/0 reports watermark 1500
      Then the source watermarks are:
        | source | watermark | active_partitions |
        | 0      | 1500      | 2                 |
        | 1      | 2000      | 1                 |
        | 2      | -         | 0                 |
      And the source changes in the last batch are:
        | batch | source | watermark | active_partitions |
        | 4     | 0      | 1500      | 2                 |
      And the combined watermark is 2000

  Rule: Cores

    @F064-R17 @F064-R22 @F064-R13 @F064-R3
    Scenario: A core assignment is metadata only; a removed partition comes back without one
      Given partitioned watermarks with the default configuration
      When source 0 is registered with 2 partitions
      And partition 0/0 is assigned to core 2
      And partition 0/1 is assigned to core 0 in the same batch
      And partition 0/0 reports watermark 100
      Then the combined watermark is none
      And the partition changes in batch 1 are:
        | batch | source | partition | watermark | state  | core |
        | 1     | 0      | 0         | -         | active | 2    |
        | 1     | 0      | 1         | -         | active | 0    |
      When partition 0/0 is assigned to core 5
      And these items arrive in the next batch:
        | kind        | source | partition | core |
        | assign_core | 0      | 0         | -1   |
        | assign_core | 0      | 9         | 1    |
        | assign_core | 3      | 0         | 1    |
      Then the errors are:
        | batch | seq | reason            |
        | 4     | 0   | invalid_partition |
        | 4     | 1   | unknown_partition |
        | 4     | 2   | unknown_source    |
      And the partition watermarks are:
        | source | partition | watermark | state  | core |
        | 0      | 0         | 100       | active | 5    |
        | 0      | 1         | -         | active | 0    |
      When partition 0/1 is removed
      Then the combined watermark is 100
      When partition 0/1 is added
      Then the partition watermarks are:
        | source | partition | watermark | state  | core |
        | 0      | 0         | 100       | active | 5    |
        | 0      | 1         | -         | active | -    |

  Rule: The stream

    @F064-R20 @F064-R16 @F064-R4 @F064-R5 @F064-R9
    Scenario: Consecutive updates are one step, so the combined watermark advances at most once per step
      Events and watermark items in a row are applied in order and the combined
      watermark is evaluated once after them; any control item ends the step.
      Given partitioned watermarks with the default configuration
      When source 0 is registered with 2 partitions
      And these items arrive in the next batch:
        | kind      | source | partition | event_time | time |
        | watermark | 0      | 0         |            | 1000 |
        | event     | 0      | 1         | 2000       |      |
        | watermark | 0      | 0         |            | 3000 |
        | event     | 0      | 1         | 2500       |      |
      Then the progress is:
        | batch | combined_watermark | watermark_advances |
        | 0     | -                  | 0                  |
        | 1     | 2500               | 1                  |
      When these items arrive in the next batch:
        | kind      | source | partition | event_time | time |
        | watermark | 0      | 0         |            | 4000 |
        | clock     |        |           |            | 0    |
        | watermark | 0      | 1         |            | 5000 |
        | idle      | 0      | 0         |            |      |
        | event     | 0      | 0         | 6000       |      |
      Then the progress is:
        | batch | combined_watermark | watermark_advances |
        | 0     | -                  | 0                  |
        | 1     | 2500               | 1                  |
        | 2     | 5000               | 3                  |
      And the partition watermarks are:
        | source | partition | watermark | state  |
        | 0      | 0         | 6000      | active |
        | 0      | 1         | 5000      | active |

    @F064-R21 @TR-5
    Scenario: Every batch reports progress, empty ones too, and a change row only when a partition or source changed
      Going idle and back to active inside one batch is no change.
      Given partitioned watermarks with the default configuration
      When an empty batch passes
      And source 0 is registered with 1 partition
      And an empty batch passes
      And these items arrive in the next batch:
        | kind      | source | partition | time |
        | watermark | 0      | 0         | 500  |
        | idle      | 0      | 0         |      |
        | active    | 0      | 0         |      |
      And these items arrive in the next batch:
        | kind   | source | partition |
        | idle   | 0      | 0         |
        | active | 0      | 0         |
      Then the progress is:
        | batch | combined_watermark | total_partitions | active_partitions | idle_partitions | watermark_advances | rebalances |
        | 0     | -                  | 0                | 0                 | 0               | 0                  | 0          |
        | 1     | -                  | 1                | 1                 | 0               | 0                  | 0          |
        | 2     | -                  | 1                | 1                 | 0               | 0                  | 0          |
        | 3     | 500                | 1                | 1                 | 0               | 1                  | 0          |
        | 4     | 500                | 1                | 1                 | 0               | 1                  | 0          |
      And the partition changes are:
        | batch | source | partition | watermark | state  | core |
        | 1     | 0      | 0         | -         | active | -    |
        | 3     | 0      | 0         | 500       | active | -    |
      And the source changes are:
        | batch | source | watermark | active_partitions |
        | 1     | 0      | -         | 1                 |
        | 3     | 0      | 500       | 1                 |

    @F064-R22 @TR-7 @TR-3
    Scenario: Items without a field they need become error rows and change nothing
      Given partitioned watermarks with the default configuration
      When these items arrive in one batch:
        | kind             | source | partition | event_time | time | count | core |
        | register_source  | 0      |           |            |      | 2     |      |
        | event            |        | 0         | 100        |      |       |      |
        | event            | 0      |           | 100        |      |       |      |
        | event            | 0      | 0         |            |      |       |      |
        | watermark        | 0      | 0         |            |      |       |      |
        | watermark        |        | 0         |            | 5    |       |      |
        | idle             | 0      |           |            |      |       |      |
        | active           |        | 0         |            |      |       |      |
        | register_source  | 1      |           |            |      |       |      |
        | register_source  |        |           |            |      | 3     |      |
        | add_partition    | 0      |           |            |      |       |      |
        | remove_partition |        | 1         |            |      |       |      |
        | assign_core      | 0      | 0         |            |      |       |      |
        | assign_core      | 0      |           |            |      |       | 1    |
        | clock            |        |           |            |      |       |      |
        | clock            |        |           |            | 500  |       |      |
        | clock            |        |           |            | 400  |       |      |
        | watermark        | 0      | 0         |            | 700  |       |      |
        | watermark        | 0      | 1         |            | 900  |       |      |
      Then the errors are:
        | batch | seq | reason               |
        | 0     | 1   | missing_source       |
        | 0     | 2   | missing_partition    |
        | 0     | 3   | missing_event_time   |
        | 0     | 4   | missing_time         |
        | 0     | 5   | missing_source       |
        | 0     | 6   | missing_partition    |
        | 0     | 7   | missing_source       |
        | 0     | 8   | missing_count        |
        | 0     | 9   | missing_source       |
        | 0     | 10  | missing_partition    |
        | 0     | 11  | missing_source       |
        | 0     | 12  | missing_core         |
        | 0     | 13  | missing_partition    |
        | 0     | 14  | missing_time         |
        | 0     | 16  | clock_went_backwards |
      And the partition watermarks are:
        | source | partition | watermark | state  | core |
        | 0      | 0         | 700       | active | -    |
        | 0      | 1         | 900       | active | -    |
      And the source watermarks are:
        | source | watermark | active_partitions |
        | 0      | 700       | 2                 |
      And the progress is:
        | batch | combined_watermark | total_partitions | watermark_advances | rebalances |
        | 0     | 700                | 2                | 1                  | 0          |

    @F064-R22 @F064-R1 @F064-R2 @F064-R12 @F064-R17
    Scenario: Numbers out of range, a partition added twice and a negative core are invalid_partition
      Partition numbers run from 0 to 4294967295, source numbers from 0 to I64_MAX,
      a source has from 0 to 4294967296 partitions.
      Given partitioned watermarks with the default configuration
      When source 0 is registered with 2 partitions
      And these items arrive in the next batch:
        | kind             | source  | partition  | event_time | time | count      | core |
        | event            | 0       | 4294967296 | 10         |      |            |      |
        | watermark        | 0       | -1         |            | 10   |            |      |
        | register_source  | -1      |            |            |      | 1          |      |
        | register_source  | 1       |            |            |      | -1         |      |
        | register_source  | 1       |            |            |      | 4294967297 |      |
        | add_partition    | 0       | 0          |            |      |            |      |
        | assign_core      | 0       | 0          |            |      |            | -1   |
        | idle             | -1      | 0          |            |      |            |      |
        | remove_partition | 0       | -1         |            |      |            |      |
        | add_partition    | 0       | 4294967295 |            |      |            |      |
        | register_source  | I64_MAX |            |            |      | 1          |      |
      Then the errors are:
        | batch | seq | reason            |
        | 1     | 0   | invalid_partition |
        | 1     | 1   | invalid_partition |
        | 1     | 2   | invalid_partition |
        | 1     | 3   | invalid_partition |
        | 1     | 4   | invalid_partition |
        | 1     | 5   | invalid_partition |
        | 1     | 6   | invalid_partition |
        | 1     | 7   | invalid_partition |
        | 1     | 8   | invalid_partition |
      And the partition watermarks are:
        | source  | partition  | watermark | state  | core |
        | 0       | 0          | -         | active | -    |
        | 0       | 1          | -         | active | -    |
        | 0       | 4294967295 | -         | active | -    |
        | I64_MAX | 0          | -         | active | -    |
      And the source watermarks are:
        | source  | watermark | active_partitions |
        | 0       | -         | 3                 |
        | I64_MAX | -         | 1                 |
      And the metrics are:
        | metric           | value |
        | total_partitions | 4     |
        | rebalances       | 1     |

    @F064-R22 @F064-R4 @F064-R9 @F064-R10 @F064-R12 @F064-R13 @F064-R17
    Scenario: Calls on an unregistered source or an untracked partition are error rows, except removal
      Given partitioned watermarks with the default configuration
      When source 0 is registered with 1 partition
      And these items arrive in the next batch:
        | kind             | source | partition | event_time | time | core |
        | event            | 1      | 0         | 100        |      |      |
        | watermark        | 0      | 1         |            | 100  |      |
        | idle             | 1      | 0         |            |      |      |
        | active           | 0      | 3         |            |      |      |
        | idle             | 0      | 2         |            |      |      |
        | add_partition    | 2      | 0         |            |      |      |
        | assign_core      | 0      | 5         |            |      | 1    |
        | assign_core      | 4      | 0         |            |      | 1    |
        | remove_partition | 0      | 9         |            |      |      |
        | remove_partition | 6      | 0         |            |      |      |
        | active           | 1      | 0         |            |      |      |
        | event            | 0      | 0         | 100        |      |      |
      Then the errors are:
        | batch | seq | reason            |
        | 1     | 0   | unknown_source    |
        | 1     | 1   | unknown_partition |
        | 1     | 2   | unknown_source    |
        | 1     | 3   | unknown_partition |
        | 1     | 4   | unknown_partition |
        | 1     | 5   | unknown_source    |
        | 1     | 6   | unknown_partition |
        | 1     | 7   | unknown_source    |
        | 1     | 10  | unknown_source    |
      And the partition watermarks are:
        | source | partition | watermark | state  |
        | 0      | 0         | 100       | active |
      And the source watermarks are:
        | source | watermark | active_partitions |
        | 0      | 100       | 1                 |
      And the metrics are:
        | metric           | value |
        | total_partitions | 1     |
        | rebalances       | 0     |

    @F064-R22 @F064-R20 @F064-R16
    Scenario: An error row ends the current step
      Without the error the four updates would be one step and one advance.
      Given partitioned watermarks with the default configuration
      When source 0 is registered with 2 partitions
      And these items arrive in the next batch:
        | kind      | source | partition | time |
        | watermark | 0      | 0         | 1000 |
        | watermark | 0      | 1         | 2000 |
        | watermark | 0      | 5         | 100  |
        | watermark | 0      | 0         | 3000 |
        | watermark | 0      | 1         | 4000 |
      Then the errors are:
        | batch | seq | reason            |
        | 1     | 2   | unknown_partition |
      And the progress is:
        | batch | combined_watermark | total_partitions | watermark_advances |
        | 0     | -                  | 2                | 0                  |
        | 1     | 3000               | 2                | 2                  |

    @F064-R22 @F064-R20
    Scenario: An item of a kind this area does not accept is an error row
      Given partitioned watermarks with the default configuration
      When source 0 is registered with 1 partition
      And these items arrive in the next batch:
        | kind       | key | source | partition | time |
        | watermark  |     | 0      | 0         | 1000 |
        | remove_key | a   |        |           |      |
        | watermark  |     | 0      | 0         | 2000 |
      Then the errors are:
        | batch | seq | reason           |
        | 1     | 1   | unsupported_item |
      And the combined watermark is 2000

    @TR-15 @F064-R22 @F064-R20
    Scenario: Every row of a repeated seq is a duplicate_seq error row, which ends the step
      The rows between the two steps shared one seq: both are error rows, and the updates
      around them are two steps, so the combined watermark advances twice.
      Given partitioned watermarks with the default configuration
      When source 0 is registered with 2 partitions
      And these items arrive in the next batch:
        | kind          | source | partition | time |
        | watermark     | 0      | 0         | 1000 |
        | watermark     | 0      | 1         | 2000 |
        | duplicate_seq |        |           |      |
        | duplicate_seq |        |           |      |
        | watermark     | 0      | 0         | 3000 |
      Then the errors are:
        | batch | seq | reason        |
        | 1     | 2   | duplicate_seq |
        | 1     | 3   | duplicate_seq |
      And the progress is:
        | batch | combined_watermark | total_partitions | watermark_advances |
        | 0     | -                  | 2                | 0                  |
        | 1     | 2000               | 2                | 2                  |

    @F064-R20 @F064-R22 @TR-14
    Scenario: The end of the input is not an item of this area, and the stream goes on
      The tracker holds no data back and a final watermark is a watermark item, so an
      end item is unsupported_item and the updates after it still move the watermark.
      Given partitioned watermarks with the default configuration
      When source 0 is registered with 1 partition
      And these items arrive in the next batch:
        | kind      | source | partition | time |
        | watermark | 0      | 0         | 1000 |
        | end       |        |           |      |
        | watermark | 0      | 0         | 2000 |
      Then the errors are:
        | batch | seq | reason           |
        | 1     | 1   | unsupported_item |
      And the combined watermark is 2000

    @F064-R22 @F064-R11 @TR-4
    Scenario: A clock that goes backwards is an error and does not move the clock
      Given partitioned watermarks with an idle timeout of 1000 ms
      When these items arrive in one batch:
        | kind            | source | partition | time | count |
        | register_source | 0      |           |      | 1     |
        | clock           |        |           | 500  |       |
        | clock           |        |           | 100  |       |
        | watermark       | 0      | 0         | 10   |       |
      And the processing clock advances to 1500 ms
      Then the errors are:
        | batch | seq | reason               |
        | 0     | 2   | clock_went_backwards |
      And the partition watermarks are:
        | source | partition | watermark | state  |
        | 0      | 0         | 10        | active |
      When the processing clock advances to 1501 ms
      Then the partition watermarks are:
        | source | partition | watermark | state |
        | 0      | 0         | 10        | idle  |
      And the combined watermark is 10

    @F064-R23 @F064-R11 @F064-R12 @F064-R17 @F064-R16 @F064-R6 @TR-5
    Scenario Outline: A restart after any batch keeps partitions, sources, the combined watermark, counters and the clock
      Given partitioned watermarks with an idle timeout of 1000 ms
      When these items arrive in one batch:
        | kind            | source | partition | time | count | core |
        | register_source | 0      |           |      | 2     |      |
        | watermark       | 0      | 0         | 5000 |       |      |
        | watermark       | 0      | 1         | 3000 |       |      |
        | assign_core     | 0      | 1         |      |       | 4    |
      And the engine <action>
      And the processing clock advances to 600 ms
      And the engine <action>
      And partition 0/0 reports watermark 8000
      And partition 0/2 is added in the same batch
      And the engine <action>
      And the processing clock advances to 1001 ms
      And the engine <action>
      And the processing clock advances to 1601 ms
      And the engine <action>
      And the processing clock advances to 1000 ms
      Then the progress is:
        | batch | combined_watermark | total_partitions | active_partitions | idle_partitions | watermark_advances | rebalances |
        | 0     | 3000               | 2                | 2                 | 0               | 1                  | 0          |
        | 1     | 3000               | 2                | 2                 | 0               | 1                  | 0          |
        | 2     | 3000               | 3                | 3                 | 0               | 1                  | 1          |
        | 3     | 3000               | 3                | 2                 | 1               | 1                  | 1          |
        | 4     | 8000               | 3                | 0                 | 3               | 2                  | 1          |
        | 5     | 8000               | 3                | 0                 | 3               | 2                  | 1          |
      And the partition watermarks are:
        | source | partition | watermark | state | core |
        | 0      | 0         | 8000      | idle  | -    |
        | 0      | 1         | 3000      | idle  | 4    |
        | 0      | 2         | -         | idle  | -    |
      And the source watermarks are:
        | source | watermark | active_partitions |
        | 0      | 8000      | 0                 |
      And the errors are:
        | batch | seq | reason               |
        | 5     | 0   | clock_went_backwards |

      Examples:
        | action                       |
        | restarts from its checkpoint |
        | keeps running                |

    @F064-R25 @F064-R20 @F064-R16 @F064-R7 @F064-R21 @TR-5
    Scenario: A batch end splits a step, so the combined watermark is evaluated there too
      The items of the scenario "Consecutive updates are one step", with its first run of
      updates cut in two after the event of 0/1 at 2000. A batch end ends a step, so the
      combined watermark is evaluated there as well: 1000, once both partitions have one, then
      2500 at the end of the run, which the uncut run reached in one advance. The last batch is
      as before. After the same items the combined watermark, the partitions and the sources are
      the same; watermark_advances is one higher from the cut on (2 after the first four
      updates, 4 at the end). The one update that reactivates an idle partition (0/0 at 6000)
      is a step of its own and does not bring the candidate below 5000, so no cut of these
      items could move the combined watermark itself.
      Given partitioned watermarks with the default configuration
      When source 0 is registered with 2 partitions
      And these items arrive in the next batch:
        | kind      | source | partition | event_time | time |
        | watermark | 0      | 0         |            | 1000 |
        | event     | 0      | 1         | 2000       |      |
      And these items arrive in the next batch:
        | kind      | source | partition | event_time | time |
        | watermark | 0      | 0         |            | 3000 |
        | event     | 0      | 1         | 2500       |      |
      And these items arrive in the next batch:
        | kind      | source | partition | event_time | time |
        | watermark | 0      | 0         |            | 4000 |
        | clock     |        |           |            | 0    |
        | watermark | 0      | 1         |            | 5000 |
        | idle      | 0      | 0         |            |      |
        | event     | 0      | 0         | 6000       |      |
      Then the progress is:
        | batch | combined_watermark | total_partitions | active_partitions | idle_partitions | watermark_advances | rebalances |
        | 0     | -                  | 2                | 2                 | 0               | 0                  | 0          |
        | 1     | 1000               | 2                | 2                 | 0               | 1                  | 0          |
        | 2     | 2500               | 2                | 2                 | 0               | 2                  | 0          |
        | 3     | 5000               | 2                | 2                 | 0               | 4                  | 0          |
      And the partition changes are:
        | batch | source | partition | watermark | state  | core |
        | 0     | 0      | 0         | -         | active | -    |
        | 0     | 0      | 1         | -         | active | -    |
        | 1     | 0      | 0         | 1000      | active | -    |
        | 1     | 0      | 1         | 2000      | active | -    |
        | 2     | 0      | 0         | 3000      | active | -    |
        | 2     | 0      | 1         | 2500      | active | -    |
        | 3     | 0      | 0         | 6000      | active | -    |
        | 3     | 0      | 1         | 5000      | active | -    |
      And the source changes are:
        | batch | source | watermark | active_partitions |
        | 0     | 0      | -         | 2                 |
        | 1     | 0      | 1000      | 2                 |
        | 2     | 0      | 2500      | 2                 |
        | 3     | 0      | 5000      | 2                 |
      And there are no errors

  Rule: Configuration

    @F064-R24 @TR-6
    Scenario Outline: A bad setting is refused before any item
      Given partitioned watermarks configured with:
        | setting   | value   |
        | <setting> | <value> |
      When source 0 is registered with 1 partition
      Then the configuration is rejected

      Examples:
        | setting         | value       |
        | idle_timeout    | -1          |
        | idle_timeout    | none        |
        | idle_timeout    | "60000"     |
        | idle_timeout    | 1.5         |
        | idle_timeout    | true        |
        | idle_timeout    | I64_MAX + 1 |
        | max_lateness    | -1          |
        | max_lateness    | none        |
        | max_lateness    | "0"         |
        | max_lateness    | 2.5         |
        | max_lateness    | false       |
        | bounded_delay   | 5000        |
        | watermark_delay | 0           |

    @F064-R24 @F064-R5 @F064-R11
    Scenario: The defaults are an idle timeout of 60000 ms and a max lateness of 0 ms
      Given partitioned watermarks with the default configuration
      When source 0 is registered with 2 partitions
      And these events arrive in the next batch:
        | source | partition | event_time |
        | 0      | 0         | 7000       |
      And the processing clock advances to 60000 ms
      Then the partition watermarks are:
        | source | partition | watermark | state  |
        | 0      | 0         | 7000      | active |
        | 0      | 1         | -         | active |
      And the combined watermark is none
      When the processing clock advances to 60001 ms
      Then the partition watermarks are:
        | source | partition | watermark | state |
        | 0      | 0         | 7000      | idle  |
        | 0      | 1         | -         | idle  |
      And the combined watermark is 7000

    @F064-R24 @F064-R5 @F064-R11 @TR-2
    Scenario: The extreme valid settings are accepted: no idle timeout at all and the largest lateness
      Given partitioned watermarks configured with:
        | setting      | value   |
        | idle_timeout | 0       |
        | max_lateness | I64_MAX |
      When source 0 is registered with 1 partition
      And these events arrive in the next batch:
        | source | partition | event_time |
        | 0      | 0         | 0          |
      Then the partition watermarks are:
        | source | partition | watermark   |
        | 0      | 0         | I64_MIN + 1 |
      When these events arrive in the next batch:
        | source | partition | event_time |
        | 0      | 0         | -5         |
      And the processing clock advances to 0 ms
      Then the partition watermarks are:
        | source | partition | watermark   | state  |
        | 0      | 0         | I64_MIN + 1 | active |
      When the processing clock advances to 1 ms
      Then the partition watermarks are:
        | source | partition | watermark   | state |
        | 0      | 0         | I64_MIN + 1 | idle  |
      And the combined watermark is I64_MIN + 1

    @F064-R24 @F064-R11 @F064-R8
    Scenario: An idle timeout of I64_MAX never fires
      Given partitioned watermarks with an idle timeout of I64_MAX ms
      When source 0 is registered with 1 partition
      And the processing clock advances to I64_MAX ms
      Then the partition watermarks are:
        | source | partition | watermark | state  |
        | 0      | 0         | -         | active |
      And the combined watermark is none

  Rule: The object API (oracle-only)

    @oracle-only @F064-R18 @F064-R19 @TR-10
    Scenario: Per-core aggregation agrees with the tracker when every partition is on a core, active and reporting
      CoreWatermarkState and collect_watermarks are objects of the thread-per-core
      runtime with no streaming meaning (TR-10): a stream only records a partition's core.
      Given a PartitionedWatermarkTracker with the default configuration
      When the tracker registers source 0 with 4 partitions
      And the tracker assigns partition 0/0 to core 0
      And the tracker assigns partition 0/1 to core 0
      And the tracker assigns partition 0/2 to core 1
      And the tracker assigns partition 0/3 to core 1
      And the cores are built from the tracker's core assignments
      Then collect_watermarks over the cores returns none
      And the combined watermark is none
      When these watermarks are reported to the tracker and to the cores:
        | source | partition | watermark |
        | 0      | 0         | 5000      |
        | 0      | 1         | 3000      |
        | 0      | 2         | 4000      |
        | 0      | 3         | 4500      |
      Then the local watermarks of the cores are:
        | core | partitions | local_watermark |
        | 0    | 0/0 0/1    | 3000            |
        | 1    | 0/2 0/3    | 4000            |
      And collect_watermarks over the cores returns 3000
      And the combined watermark is 3000
      When these watermarks are reported to the tracker and to the cores:
        | source | partition | watermark |
        | 0      | 1         | 6000      |
      Then the local watermarks of the cores are:
        | core | partitions | local_watermark |
        | 0    | 0/0 0/1    | 5000            |
        | 1    | 0/2 0/3    | 4000            |
      And collect_watermarks over the cores returns 4000
      And the combined watermark is 4000

    @oracle-only @F064-R18 @F064-R19 @F064-R6 @TR-10
    Scenario: Per-core aggregation knows nothing of idleness, so it parts from the tracker when a partition or every partition is idle
      CoreWatermarkState is an object of the thread-per-core runtime with no
      streaming meaning (TR-10). It is the minimum over its assigned partitions,
      idle or not; the tracker leaves idle partitions out, and takes the highest
      watermark when all are idle.
      Given a PartitionedWatermarkTracker with the default configuration
      When the tracker registers source 0 with 4 partitions
      And the tracker assigns partition 0/0 to core 0
      And the tracker assigns partition 0/1 to core 0
      And the tracker assigns partition 0/2 to core 1
      And the tracker assigns partition 0/3 to core 1
      And the cores are built from the tracker's core assignments
      And these watermarks are reported to the tracker and to the cores:
        | source | partition | watermark |
        | 0      | 0         | 5000      |
        | 0      | 1         | 3000      |
        | 0      | 2         | 4000      |
        | 0      | 3         | 4500      |
      And the tracker marks partition 0/1 idle
      Then the combined watermark is 4000
      And collect_watermarks over the cores returns 3000
      When the tracker marks partition 0/0 idle
      And the tracker marks partition 0/2 idle
      And the tracker marks partition 0/3 idle
      Then the combined watermark is 5000
      And collect_watermarks over the cores returns 3000
      When core 0 updates partition 0/1 to 4500 ms
      Then the result is 4500
      When core 1 updates partition 0/3 to 9000 ms
      Then the result is none
      And the local watermarks of the cores are:
        | core | partitions | local_watermark |
        | 0    | 0/0 0/1    | 4500            |
        | 1    | 0/2 0/3    | 4000            |
      And collect_watermarks over the cores returns 4000
      When core 0 updates partition 0/2 to 100 ms
      Then the call raises UnknownPartition

    @oracle-only @F064-R18 @F064-R19 @TR-10
    Scenario: Per-core aggregation does not see a partition that has no core
      CoreWatermarkState is an object of the thread-per-core runtime with no
      streaming meaning (TR-10).
      Given a PartitionedWatermarkTracker with the default configuration
      When the tracker registers source 0 with 2 partitions
      And the tracker assigns partition 0/0 to core 0
      And the cores are built from the tracker's core assignments
      And these watermarks are reported to the tracker and to the cores:
        | source | partition | watermark |
        | 0      | 0         | 5000      |
        | 0      | 1         | 1000      |
      Then the combined watermark is 1000
      And collect_watermarks over the cores returns 5000

    @oracle-only @F064-R5 @F064-R24 @F064-R7 @TR-10
    Scenario: update_partition_from_event takes the max lateness per call and refuses a negative one
      A stream uses the trace's max_lateness for every event; a lateness per call
      exists only in the API (TR-10).
      Given a PartitionedWatermarkTracker with the default configuration
      When the tracker registers source 0 with 2 partitions
      And the tracker updates partition 0/0 from an event at 10000 ms with a max lateness of 2000 ms
      Then the result is none
      When the tracker updates partition 0/1 from an event at 10000 ms with a max lateness of 500 ms
      Then the result is 8000
      And the partition watermarks are:
        | source | partition | watermark |
        | 0      | 0         | 8000      |
        | 0      | 1         | 9500      |
      When the tracker updates partition 0/0 from an event at 20000 ms with a max lateness of -1 ms
      Then the call raises InvalidConfig
      And the partition watermarks are:
        | source | partition | watermark |
        | 0      | 0         | 8000      |
        | 0      | 1         | 9500      |
      When the tracker updates partition 0/0 from an event at I64_MIN + 1 ms with a max lateness of 10 ms
      Then the result is none
      And the combined watermark is 8000

    @oracle-only @F064-R1 @F064-R4 @F064-R9 @F064-R10 @F064-R12 @F064-R13 @F064-R17 @F064-R2 @TR-10
    Scenario: The API raises SourceNotFound, UnknownPartition and InvalidPartition where a stream writes an error row
      The exceptions themselves are API behaviour (TR-10); the stream shows the same
      refusals as error rows (see "Calls on an unregistered source or an untracked
      partition are error rows, except removal").
      Given a PartitionedWatermarkTracker with the default configuration
      When the tracker registers source 0 with 2 partitions
      And the tracker updates partition 1/0 to 100 ms
      Then the call raises SourceNotFound
      When the tracker updates partition 0/2 to 100 ms
      Then the call raises UnknownPartition
      When the tracker updates partition 0/4294967296 to 100 ms
      Then the call raises InvalidPartition
      When the tracker updates partition -1/0 to 100 ms
      Then the call raises InvalidPartition
      When the tracker updates partition 0/2 from an event at 100 ms with a max lateness of 0 ms
      Then the call raises UnknownPartition
      When the tracker marks partition 3/0 idle
      Then the call raises SourceNotFound
      When the tracker marks partition 0/5 active
      Then the call raises UnknownPartition
      When the tracker adds partition 2/0
      Then the call raises SourceNotFound
      When the tracker adds partition 0/1
      Then the call raises InvalidPartition
      When the tracker assigns partition 0/0 to core -1
      Then the call raises InvalidPartition
      When the tracker assigns partition 0/7 to core 1
      Then the call raises UnknownPartition
      When the tracker registers source 0 with -1 partitions
      Then the call raises InvalidPartition
      When the tracker removes partition 0/9
      Then the result is none
      When the tracker removes partition 4/0
      Then the result is none
      And the metrics are:
        | metric           | value |
        | total_partitions | 2     |
        | rebalances       | 0     |
      And the combined watermark is none

    @oracle-only @F064-R15 @F064-R4 @F064-R7 @F064-R13 @F064-R14 @F064-R16 @TR-10
    Scenario: Calls return the new combined watermark only when it rises, and queries never raise
      Return values and query calls are API behaviour (TR-10); a stream reports the
      same state in its output tables.
      Given a PartitionedWatermarkTracker with the default configuration
      When the tracker registers source 0 with 2 partitions
      And the tracker updates partition 0/0 to 5000 ms
      Then the result is none
      When the tracker updates partition 0/1 to 3000 ms
      Then the result is 3000
      When the tracker updates partition 0/1 to 4000 ms
      Then the result is 4000
      When the tracker updates partition 0/1 to 3500 ms
      Then the result is none
      When the tracker marks partition 0/1 idle
      Then the result is 5000
      When the tracker checks idle partitions
      Then the result is none
      When the tracker removes partition 0/0
      Then the result is a partition state with watermark 5000
      And the queries answer:
        | query                  | argument | answer |
        | current_watermark      |          | 5000   |
        | partition_watermark    | 0/1      | 4000   |
        | partition_watermark    | 0/0      | none   |
        | partition_watermark    | 9/9      | none   |
        | partition_watermark    | -1/0     | none   |
        | is_partition_idle      | 0/1      | true   |
        | is_partition_idle      | 0/0      | false  |
        | partition_core         | 0/1      | none   |
        | partition_core         | 0/0      | none   |
        | source_watermark       | 0        | 4000   |
        | source_watermark       | 9        | none   |
        | active_partition_count | 0        | 0      |
        | active_partition_count | 9        | 0      |
      And the metrics are:
        | metric             | value |
        | total_partitions   | 1     |
        | idle_partitions    | 1     |
        | watermark_advances | 3     |
        | rebalances         | 1     |
