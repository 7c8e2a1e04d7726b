@F065
Feature: Keyed watermarks
  One watermark per key (tenant, device) instead of one per stream, so a key
  that runs ahead never makes a slower key's on-time events late; a global
  watermark (the minimum over the keys still producing) remains for operators
  that need one ordering point. An end item (the input is complete) fires
  every keyed window still open. Clauses: spec/keyed_watermarks.md.

  Times are milliseconds. Batches are numbered from 0 as in the output tables:
  each When step that adds items is one new batch unless it says "in the same
  batch" (see harness/steps.py). An empty cell is a missing field; "-" in an
  expected table is null (no watermark).

  Rule: Per-key watermarks and lateness

    @F065-R2 @F065-R3 @F065-R4 @F065-R5 @TR-1 @TR-8 @TR-9
    Scenario: A slow tenant is judged by its own watermark
      The seed's worked example.
      Given keyed watermarks with a bounded delay of 5000 ms
      When these events arrive in one batch:
        | key      | event_time |
        | tenant_a | 10000      |
        | tenant_a | 15000      |
        | tenant_b | 5000       |
      Then the key watermarks are:
        | key      | watermark |
        | tenant_a | 10000     |
        | tenant_b | 0         |
      And the global watermark is 0
      When these events arrive in the next batch:
        | key      | event_time |
        | tenant_b | 3000       |
        | tenant_a | 3000       |
      Then the verdicts in the last batch are:
        | key      | event_time | key_watermark | verdict |
        | tenant_b | 3000       | 0             | on time |
        | tenant_a | 3000       | 10000         | late    |
      And the event of key tenant_a at 3000 ms is late
      And the event of key tenant_b at 3000 ms is on time
      And the key watermarks are:
        | key      | watermark |
        | tenant_a | 10000     |
        | tenant_b | 0         |
      And the global watermark is 0

    @F065-R1 @F065-R3
    Scenario: A key is tracked from its first event and an untracked key has no watermark
      Given keyed watermarks with a bounded delay of 5000 ms
      When these events arrive in one batch:
        | key      | event_time |
        | sensor_1 | 7000       |
      Then the key watermarks are:
        | key      | watermark |
        | sensor_1 | 2000      |
      And key sensor_2 is not tracked
      When these events arrive in the next batch:
        | key      | event_time |
        | sensor_2 | 100        |
      Then the verdicts in the last batch are:
        | key      | event_time | key_watermark | verdict |
        | sensor_2 | 100        | -             | on time |
      And the key watermarks are:
        | key      | watermark |
        | sensor_1 | 2000      |
        | sensor_2 | -4900     |

    @F065-R2 @F065-R3 @F065-R19
    Scenario: A key's watermark is its maximum event time minus the delay and never goes down
      Given keyed watermarks with a bounded delay of 5000 ms
      When these events arrive in one batch:
        | key | event_time |
        | k   | 10000      |
        | k   | 8000       |
        | k   | 12000      |
      Then the verdicts are:
        | batch | seq | key | event_time | key_watermark | verdict |
        | 0     | 0   | k   | 10000      | -             | on time |
        | 0     | 1   | k   | 8000       | 5000          | on time |
        | 0     | 2   | k   | 12000      | 5000          | on time |
      And the key watermarks are:
        | key | watermark |
        | k   | 7000      |
      When these events arrive in the next batch:
        | key | event_time |
        | k   | 1000       |
      Then the verdicts in the last batch are:
        | key | event_time | key_watermark | verdict |
        | k   | 1000       | 7000          | late    |
      And the key watermarks are:
        | key | watermark |
        | k   | 7000      |
      And the key changes in the last batch are:
        | batch | key | watermark | state |
      And the metrics are:
        | metric       | value |
        | key_advances | 2     |

    @F065-R2 @F065-R3 @F065-R19 @TR-2
    Scenario: A watermark may be negative and saturates at the lower bound of time
      A first event whose watermark saturates still counts as a key advance; a later
      event that raises the maximum event time but not the saturated watermark does not.
      Given keyed watermarks with a bounded delay of 5000 ms
      When these events arrive in one batch:
        | key | event_time     |
        | a   | 3000           |
        | b   | I64_MIN + 1000 |
      Then the key watermarks are:
        | key | watermark |
        | a   | -2000     |
        | b   | I64_MIN   |
      When these events arrive in the next batch:
        | key | event_time     |
        | b   | I64_MIN        |
        | b   | I64_MIN + 2000 |
      Then the verdicts in the last batch are:
        | key | event_time     | key_watermark | verdict |
        | b   | I64_MIN        | I64_MIN       | on time |
        | b   | I64_MIN + 2000 | I64_MIN       | on time |
      And the key watermarks are:
        | key | watermark |
        | a   | -2000     |
        | b   | I64_MIN   |
      And the metrics are:
        | metric       | value |
        | key_advances | 2     |

    @F065-R3
    Scenario: An event exactly at its key's watermark is on time and one millisecond below is late
      Given keyed watermarks with a bounded delay of 5000 ms
      When these events arrive in one batch:
        | key | event_time |
        | k   | 10000      |
      And these events arrive in the next batch:
        | key | event_time |
        | k   | 5000       |
        | k   | 4999       |
      Then the verdicts in the last batch are:
        | key | event_time | key_watermark | verdict |
        | k   | 5000       | 5000          | on time |
        | k   | 4999       | 5000          | late    |

    @F065-R3 @F065-R16
    Scenario: Inside one batch each event is judged by its key's watermark just before it
      Given keyed watermarks with a bounded delay of 5000 ms
      When these events arrive in one batch:
        | key | event_time |
        | k   | 20000      |
        | k   | 10000      |
        | k   | 15000      |
      Then the verdicts are:
        | key | event_time | key_watermark | verdict |
        | k   | 20000      | -             | on time |
        | k   | 10000      | 15000         | late    |
        | k   | 15000      | 15000         | on time |

  Rule: The global watermark

    @F065-R5 @F065-R9
    Scenario: The global watermark is the minimum over the active keys and none before any key
      Given keyed watermarks with a bounded delay of 5000 ms
      When an empty batch passes
      Then the global watermark is none
      And the metrics are:
        | metric     | value |
        | total_keys | 0     |
      When these events arrive in the next batch:
        | key | event_time |
        | a   | 10000      |
        | b   | 20000      |
      Then the global watermark is 5000
      When key a is marked idle
      Then the global watermark is 15000
      And the key watermarks are:
        | key | watermark | state  |
        | a   | 5000      | idle   |
        | b   | 15000     | active |

    @F065-R6 @F065-R8
    Scenario: The global watermark goes down when a slower key appears
      Given keyed watermarks with a bounded delay of 5000 ms
      When these events arrive in one batch:
        | key      | event_time |
        | tenant_a | 10000      |
        | tenant_a | 15000      |
      And these events arrive in the next batch:
        | key      | event_time |
        | tenant_b | 5000       |
      Then the progress is:
        | batch | global_watermark | global_advances |
        | 0     | 10000            | 1               |
        | 1     | 0                | 1               |

    @F065-R6 @F065-R11
    Scenario: The global watermark goes down when an idle key becomes active again
      Given keyed watermarks with a bounded delay of 5000 ms
      When these events arrive in one batch:
        | key | event_time |
        | a   | 10000      |
        | b   | 30000      |
      And key a is marked idle
      And these events arrive in the next batch:
        | key | event_time |
        | a   | 10001      |
      Then the progress is:
        | batch | global_watermark | global_advances |
        | 0     | 5000             | 1               |
        | 1     | 25000            | 2               |
        | 2     | 5001             | 2               |
      And the key watermarks are:
        | key | watermark | state  |
        | a   | 5001      | active |
        | b   | 25000     | active |

    @F065-R7 @F065-R9
    Scenario Outline: With every key idle the global watermark is the highest key watermark, in whatever order they went idle
      Given keyed watermarks with a bounded delay of 5000 ms
      When these events arrive in one batch:
        | key | event_time |
        | a   | 10000      |
        | b   | 30000      |
        | c   | 20000      |
      And key <first> is marked idle
      And key <second> is marked idle
      And key <third> is marked idle
      Then the global watermark is 25000
      And the metrics are:
        | metric      | value |
        | active_keys | 0     |
        | idle_keys   | 3     |

      Examples:
        | first | second | third |
        | a     | b      | c     |
        | c     | b      | a     |
        | b     | a      | c     |

    @F065-R8
    Scenario: Only a strictly higher global watermark counts as an advance
      Given keyed watermarks with a bounded delay of 5000 ms
      When these events arrive one per batch:
        | key | event_time |
        | a   | 10000      |
        | a   | 12000      |
        | a   | 11000      |
        | b   | 1000       |
        | b   | 20000      |
      Then the progress is:
        | batch | global_watermark | global_advances |
        | 0     | 5000             | 1               |
        | 1     | 7000             | 2               |
        | 2     | 7000             | 2               |
        | 3     | -4000            | 2               |
        | 4     | 7000             | 3               |

  Rule: Idleness

    @F065-R9 @F065-R7
    Scenario: Marking an unknown key idle changes nothing, and marking a key idle twice is like once
      Given keyed watermarks with a bounded delay of 5000 ms
      When key ghost is marked idle
      Then the global watermark is none
      And there are no errors
      And the key changes are:
        | batch | key | watermark | state |
      When these events arrive in the next batch:
        | key | event_time |
        | a   | 10000      |
      And key a is marked idle in the same batch
      And key a is marked idle in the same batch
      Then the key watermarks are:
        | key | watermark | state |
        | a   | 5000      | idle  |
      And the progress is:
        | batch | global_watermark | total_keys | idle_keys | global_advances |
        | 0     | -                | 0          | 0         | 0               |
        | 1     | 5000             | 1          | 1         | 1               |

    @F065-R10
    Scenario: The idle timeout fires only when it is strictly exceeded
      Given keyed watermarks with a bounded delay of 5000 ms and an idle timeout of 1000 ms
      When these events arrive in one batch:
        | key | event_time |
        | a   | 10000      |
        | b   | 20000      |
      And the processing clock advances to 1000 ms
      Then the key watermarks are:
        | key | watermark | state  |
        | a   | 5000      | active |
        | b   | 15000     | active |
      And the global watermark is 5000
      When the processing clock advances to 1001 ms
      Then the key watermarks are:
        | key | watermark | state |
        | a   | 5000      | idle  |
        | b   | 15000     | idle  |
      And the global watermark is 15000

    @F065-R10 @F065-R11
    Scenario: A key's idle timeout counts from its latest event on the processing clock
      Given keyed watermarks with a bounded delay of 5000 ms
      And an idle timeout of 1000 ms
      When these events arrive in one batch:
        | key | event_time |
        | a   | 10000      |
        | b   | 10000      |
      And these items arrive in the next batch:
        | kind  | key | event_time | time |
        | clock |     |            | 800  |
        | event | b   | 11000      |      |
      And the processing clock advances to 1500 ms
      Then the key watermarks are:
        | key | watermark | state  |
        | a   | 5000      | idle   |
        | b   | 6000      | active |
      And the global watermark is 6000
      When the processing clock advances to 1801 ms
      Then the key watermarks are:
        | key | watermark | state |
        | a   | 5000      | idle  |
        | b   | 6000      | idle  |
      And the metrics are:
        | metric      | value |
        | active_keys | 0     |
        | idle_keys   | 2     |

    @F065-R5 @F065-R10
    Scenario: A silent key holds the global watermark back only until its idle timeout
      Given keyed watermarks with a bounded delay of 5000 ms and an idle timeout of 1000 ms
      When these events arrive in one batch:
        | key | event_time |
        | a   | 10000      |
        | b   | 10000      |
      And these items arrive in the next batch:
        | kind  | key | event_time | time |
        | clock |     |            | 500  |
        | event | b   | 50000      |      |
      Then the global watermark is 5000
      When the processing clock advances to 1001 ms
      Then the key watermarks are:
        | key | watermark | state  |
        | a   | 5000      | idle   |
        | b   | 45000     | active |
      And the global watermark is 45000

    @F065-R11
    Scenario: Any event reactivates an idle key, even a late one
      Given keyed watermarks with a bounded delay of 5000 ms
      When these events arrive in one batch:
        | key | event_time |
        | a   | 10000      |
        | b   | 20000      |
      And key a is marked idle
      Then the global watermark is 15000
      When these events arrive in the next batch:
        | key | event_time |
        | a   | 1000       |
      Then the verdicts in the last batch are:
        | key | event_time | key_watermark | verdict |
        | a   | 1000       | 5000          | late    |
      And the key watermarks are:
        | key | watermark | state  |
        | a   | 5000      | active |
        | b   | 15000     | active |
      And the global watermark is 5000

    @F065-R3 @F065-R4 @F065-R11 @F065-R10
    Scenario: A key that resumes after idling is judged by its own watermark and not dropped
      Given keyed watermarks with a bounded delay of 5000 ms and an idle timeout of 1000 ms
      When these events arrive in one batch:
        | key | event_time |
        | a   | 10000      |
        | b   | 10000      |
      And these items arrive in the next batch:
        | kind  | key | event_time | time |
        | clock |     |            | 900  |
        | event | b   | 40000      |      |
      And the processing clock advances to 1500 ms
      Then the global watermark is 35000
      When these events arrive in the next batch:
        | key | event_time |
        | a   | 6000       |
      Then the verdicts in the last batch are:
        | key | event_time | key_watermark | verdict |
        | a   | 6000       | 5000          | on time |
      And the key watermarks are:
        | key | watermark | state  |
        | a   | 5000      | active |
        | b   | 35000     | active |
      And the global watermark is 5000
      When the processing clock advances to 2400 ms
      Then the key watermarks are:
        | key | watermark | state  |
        | a   | 5000      | active |
        | b   | 35000     | idle   |
      When the processing clock advances to 2501 ms
      Then the key watermarks are:
        | key | watermark | state |
        | a   | 5000      | idle  |
        | b   | 35000     | idle  |
      And the global watermark is 35000

    @F065-R25 @F065-R10 @F065-R3
    Scenario: Idle keys stay tracked and keep their watermark until they are removed
      Given keyed watermarks with a bounded delay of 5000 ms and an idle timeout of 1000 ms
      When these events arrive in one batch:
        | key | event_time |
        | a   | 10000      |
      And the processing clock advances to 100000 ms
      Then the key watermarks are:
        | key | watermark | state |
        | a   | 5000      | idle  |
      And the metrics are:
        | metric     | value |
        | total_keys | 1     |
        | idle_keys  | 1     |
      When these events arrive in the next batch:
        | key | event_time |
        | a   | 4000       |
      Then the event of key a at 4000 ms is late

  Rule: Bounded key count

    @F065-R12 @F065-R13
    Scenario: LeastRecentlyActive evicts the key whose latest event is oldest on the processing clock
      Given keyed watermarks with a bounded delay of 5000 ms and at most 2 keys evicting LeastRecentlyActive
      When these items arrive in one batch:
        | kind  | key | event_time | time |
        | event | a   | 1000       |      |
        | clock |     |            | 100  |
        | event | b   | 2000       |      |
        | clock |     |            | 200  |
        | event | a   | 1500       |      |
      And these events arrive in the next batch:
        | key | event_time |
        | c   | 3000       |
      Then the key watermarks are:
        | key | watermark |
        | a   | -3500     |
        | c   | -2000     |
      And the key changes in the last batch are:
        | batch | key | watermark | state   |
        | 1     | b   | -         | removed |
        | 1     | c   | -2000     | active  |
      And the metrics are:
        | metric       | value |
        | total_keys   | 2     |
        | evicted_keys | 1     |

    @F065-R13
    Scenario: Ties in last activity go to the key whose latest event arrived first
      Given keyed watermarks with a bounded delay of 0 ms and at most 2 keys evicting LeastRecentlyActive
      When these events arrive in one batch:
        | key | event_time |
        | a   | 1000       |
        | b   | 2000       |
        | a   | 1500       |
      And these events arrive in the next batch:
        | key | event_time |
        | c   | 3000       |
      Then the key watermarks are:
        | key | watermark |
        | a   | 1500      |
        | c   | 3000      |

    @F065-R12 @F065-R1
    Scenario: Events of tracked keys never evict and an evicted key comes back as a new key
      Given keyed watermarks with a bounded delay of 0 ms and at most 2 keys evicting LeastRecentlyActive
      When these events arrive in one batch:
        | key | event_time |
        | a   | 1000       |
        | b   | 2000       |
        | b   | 3000       |
        | a   | 4000       |
      Then the metrics are:
        | metric       | value |
        | evicted_keys | 0     |
      When these events arrive in the next batch:
        | key | event_time |
        | c   | 5000       |
      Then the key watermarks are:
        | key | watermark |
        | a   | 4000      |
        | c   | 5000      |
      When these events arrive in the next batch:
        | key | event_time |
        | b   | 1000       |
      Then the verdicts in the last batch are:
        | key | event_time | key_watermark | verdict |
        | b   | 1000       | -             | on time |
      And the key watermarks are:
        | key | watermark |
        | b   | 1000      |
        | c   | 5000      |
      And the metrics are:
        | metric       | value |
        | total_keys   | 2     |
        | evicted_keys | 2     |

    @F065-R14
    Scenario: LowestWatermark evicts the key with the lowest watermark
      Given keyed watermarks with a bounded delay of 5000 ms and at most 2 keys evicting LowestWatermark
      When these events arrive in one batch:
        | key | event_time |
        | a   | 50000      |
        | b   | 10000      |
      And these events arrive in the next batch:
        | key | event_time |
        | c   | 30000      |
      Then the key watermarks are:
        | key | watermark |
        | a   | 45000     |
        | c   | 25000     |

    @F065-R14 @F065-R13
    Scenario: LowestWatermark breaks ties like LeastRecentlyActive
      Given keyed watermarks with a bounded delay of 0 ms and at most 2 keys evicting LowestWatermark
      When these events arrive in one batch:
        | key | event_time |
        | a   | 10000      |
        | b   | 10000      |
        | a   | 5000       |
      And these events arrive in the next batch:
        | key | event_time |
        | c   | 20000      |
      Then the key watermarks are:
        | key | watermark |
        | a   | 10000     |
        | c   | 20000     |

    @F065-R15 @F065-R12
    Scenario: RejectNew refuses a new key at the limit and the stream goes on
      Given keyed watermarks with a bounded delay of 5000 ms and at most 2 keys under RejectNew
      When these events arrive in one batch:
        | key | event_time |
        | a   | 10000      |
        | b   | 20000      |
      And these events arrive in the next batch:
        | key | event_time |
        | c   | 1000       |
        | a   | 30000      |
      Then the verdicts in the last batch are:
        | key | event_time | key_watermark | verdict  |
        | c   | 1000       | -             | rejected |
        | a   | 30000      | 5000          | on time  |
      And key c is not tracked
      And the key watermarks are:
        | key | watermark |
        | a   | 25000     |
        | b   | 15000     |
      And the metrics are:
        | metric          | value |
        | total_keys      | 2     |
        | evicted_keys    | 0     |
        | key_advances    | 3     |
        | global_advances | 2     |
      When these events arrive in the next batch:
        | key | event_time |
        | c   | 2000       |
      Then the event of key c at 2000 ms is rejected
      And the global watermark is 15000

  Rule: Calls as stream items

    @F065-R16 @F065-R22 @F065-R8
    Scenario: Consecutive events are one update, so the global watermark advances at most once per segment
      Given keyed watermarks with a bounded delay of 5000 ms
      When these events arrive in one batch:
        | key | event_time |
        | a   | 10000      |
        | b   | 20000      |
        | a   | 30000      |
      Then the progress is:
        | batch | global_watermark | global_advances | key_advances |
        | 0     | 15000            | 1               | 3            |

    @F065-R16 @F065-R22 @F065-R8
    Scenario: Control items split a batch into segments, each one update
      Given keyed watermarks with a bounded delay of 5000 ms
      When these items arrive in one batch:
        | kind  | key | event_time | time |
        | event | a   | 10000      |      |
        | clock |     |            | 0    |
        | event | b   | 20000      |      |
        | clock |     |            | 0    |
        | event | a   | 30000      |      |
      Then the progress is:
        | batch | global_watermark | global_advances |
        | 0     | 15000            | 2               |
      And there are no errors

    @F065-R17 @F065-R8 @F065-R1
    Scenario: Removing a key recomputes the global watermark and a removed key comes back as new
      Given keyed watermarks with a bounded delay of 5000 ms
      When these events arrive in one batch:
        | key | event_time |
        | a   | 10000      |
        | b   | 30000      |
      And key a is removed
      Then the global watermark is 25000
      And the key changes in the last batch are:
        | batch | key | watermark | state   |
        | 1     | a   | -         | removed |
      And the key watermarks are:
        | key | watermark |
        | b   | 25000     |
      And the metrics are:
        | metric          | value |
        | total_keys      | 1     |
        | global_advances | 2     |
      When key ghost is removed
      Then there are no errors
      And the key changes in the last batch are:
        | batch | key | watermark | state |
      When these events arrive in the next batch:
        | key | event_time |
        | a   | 1000       |
      Then the verdicts in the last batch are:
        | key | event_time | key_watermark | verdict |
        | a   | 1000       | -             | on time |
      And the global watermark is -4000
      And the metrics are:
        | metric          | value |
        | key_advances    | 3     |
        | global_advances | 2     |

    @F065-R17 @F065-R5 @F065-R8
    Scenario: Removing the last key leaves no global watermark
      Given keyed watermarks with a bounded delay of 5000 ms
      When these events arrive in one batch:
        | key | event_time |
        | a   | 10000      |
      And key a is removed
      Then the global watermark is none
      And the metrics are:
        | metric          | value |
        | total_keys      | 0     |
        | global_advances | 1     |

    @F065-R19 @F065-R12 @F065-R8
    Scenario: The metrics count keys now and advances and evictions since the start
      Given keyed watermarks with a bounded delay of 5000 ms and at most 2 keys evicting LeastRecentlyActive
      When these events arrive in one batch:
        | key | event_time |
        | a   | 10000      |
        | b   | 20000      |
        | a   | 30000      |
        | c   | 1000       |
      And key c is marked idle
      Then the key watermarks are:
        | key | watermark | state  |
        | a   | 25000     | active |
        | c   | -4000     | idle   |
      And the metrics are:
        | metric          | value |
        | total_keys      | 2     |
        | active_keys     | 1     |
        | idle_keys       | 1     |
        | evicted_keys    | 1     |
        | global_advances | 2     |
        | key_advances    | 4     |

  Rule: Configuration

    @F065-R20 @TR-6
    Scenario Outline: A bad setting is refused before any event
      Given keyed watermarks configured with:
        | setting   | value   |
        | <setting> | <value> |
      When these events arrive in one batch:
        | key | event_time |
        | a   | 1000       |
      Then the configuration is rejected

      Examples:
        | setting         | value               |
        | bounded_delay   | -1                  |
        | bounded_delay   | none                |
        | bounded_delay   | "5000"              |
        | bounded_delay   | 1.5                 |
        | bounded_delay   | true                |
        | idle_timeout    | -1                  |
        | idle_timeout    | none                |
        | idle_timeout    | "60000"             |
        | max_keys        | 0                   |
        | max_keys        | -3                  |
        | max_keys        | "2"                 |
        | max_keys        | true                |
        | eviction_policy | Random              |
        | eviction_policy | leastrecentlyactive |
        | eviction_policy | none                |
        | eviction_policy | 5                   |
        | window_size     | 0                   |
        | window_size     | -10                 |
        | window_size     | "10"                |
        | watermark_delay | 5000                |

    @F065-R20 @F065-R10
    Scenario: The defaults are a delay of 5000 ms and an idle timeout of 60000 ms
      Given keyed watermarks with the default configuration
      When these events arrive in one batch:
        | key | event_time |
        | a   | 10000      |
      And the processing clock advances to 60000 ms
      Then the key watermarks are:
        | key | watermark | state  |
        | a   | 5000      | active |
      When the processing clock advances to 60001 ms
      Then the key watermarks are:
        | key | watermark | state |
        | a   | 5000      | idle  |

    @F065-R20 @F065-R21 @F065-R14
    Scenario: The smallest valid settings are accepted
      Given keyed watermarks configured with:
        | setting         | value           |
        | bounded_delay   | 0               |
        | idle_timeout    | 0               |
        | max_keys        | 1               |
        | eviction_policy | LowestWatermark |
        | window_size     | 1               |
      When these events arrive in one batch:
        | key | event_time | value |
        | a   | 7          | 3     |
        | a   | 8          | 1     |
      Then these windows fire in batch 0:
        | key | window_start | window_end | count | sum |
        | a   | 7            | 8          | 1     | 3   |
      When the processing clock advances to 0 ms
      Then the key watermarks are:
        | key | watermark | state  |
        | a   | 8         | active |
      When the processing clock advances to 1 ms
      Then the key watermarks are:
        | key | watermark | state |
        | a   | 8         | idle  |
      When these events arrive in the next batch:
        | key | event_time | value |
        | b   | 5          | 1     |
      Then the key watermarks are:
        | key | watermark | state  |
        | b   | 5         | active |
      And no windows fire in batch 3
      And the metrics are:
        | metric       | value |
        | evicted_keys | 1     |

  Rule: Windows per key

    @F065-R21
    Scenario: A key's window fires once its own watermark reaches the window's end
      Late events are not counted, even in a window that is still open.
      Given keyed watermarks with a bounded delay of 5000 ms and tumbling windows of 10000 ms
      When these events arrive in one batch:
        | key | event_time | value |
        | k   | 1000       | 1     |
        | k   | 9000       | 2     |
        | k   | 12000      | 4     |
      Then no windows fire
      When these events arrive in the next batch:
        | key | event_time | value |
        | k   | 16000      | 8     |
      Then these windows fire in batch 1:
        | key | window_start | window_end | count | sum |
        | k   | 0            | 10000      | 2     | 3   |
      When these events arrive in the next batch:
        | key | event_time | value |
        | k   | 10500      | 16    |
        | k   | 25000      | 32    |
      Then the verdicts in the last batch are:
        | key | event_time | key_watermark | verdict |
        | k   | 10500      | 11000         | late    |
        | k   | 25000      | 11000         | on time |
      And these windows fire in batch 2:
        | key | window_start | window_end | count | sum |
        | k   | 10000        | 20000      | 2     | 12  |
      And the windows are:
        | batch | key | window_start | window_end | count | sum |
        | 1     | k   | 0            | 10000      | 2     | 3   |
        | 2     | k   | 10000        | 20000      | 2     | 12  |

    @F065-R21
    Scenario: Window starts round down, below zero too
      Given keyed watermarks with a bounded delay of 0 ms and tumbling windows of 10 ms
      When these events arrive in one batch:
        | key | event_time | value |
        | k   | -1         | 1     |
      Then no windows fire
      When these events arrive in the next batch:
        | key | event_time | value |
        | k   | 0          | 2     |
      Then these windows fire in batch 1:
        | key | window_start | window_end | count | sum |
        | k   | -10          | 0          | 1     | 1   |

    @F065-R21 @F065-R2
    Scenario: The last window of time ends at the upper bound and fires
      Given keyed watermarks with a bounded delay of 0 ms and tumbling windows of 10 ms
      When these events arrive in one batch:
        | key | event_time | value |
        | k   | I64_MAX    | 5     |
      Then these windows fire in batch 0:
        | key | window_start | window_end | count | sum |
        | k   | I64_MAX - 7  | I64_MAX    | 1     | 5   |

    @F065-R21 @F065-R4 @F065-R9
    Scenario: A slow key's windows are not closed by a fast key, nor when it goes idle
      Given keyed watermarks with a bounded delay of 0 ms and tumbling windows of 10000 ms
      When these events arrive in one batch:
        | key  | event_time | value |
        | slow | 1000       | 1     |
        | fast | 50000      | 1     |
      Then no windows fire
      And the global watermark is 1000
      When these events arrive in the next batch:
        | key  | event_time | value |
        | fast | 61000      | 1     |
        | slow | 2000       | 2     |
      And key slow is marked idle in the same batch
      Then these windows fire in batch 1:
        | key  | window_start | window_end | count | sum |
        | fast | 50000        | 60000      | 1     | 1   |
      And the global watermark is 61000
      When these events arrive in the next batch:
        | key  | event_time | value |
        | slow | 12000      | 4     |
      Then these windows fire in batch 2:
        | key  | window_start | window_end | count | sum |
        | slow | 0            | 10000      | 2     | 3   |
      And the verdicts are:
        | key  | event_time | verdict |
        | slow | 1000       | on time |
        | fast | 50000      | on time |
        | fast | 61000      | on time |
        | slow | 2000       | on time |
        | slow | 12000      | on time |

    @F065-R21 @F065-R15
    Scenario: Refused events are not counted in windows
      Given keyed watermarks with a bounded delay of 0 ms, tumbling windows of 10 ms and at most 1 key under RejectNew
      When these events arrive in one batch:
        | key | event_time | value |
        | a   | 5          | 1     |
        | b   | 6          | 2     |
        | a   | 20         | 4     |
      Then the windows are:
        | batch | key | window_start | window_end | count | sum |
        | 0     | a   | 0            | 10         | 1     | 1   |

    @F065-R21 @F065-R17
    Scenario: A removed key's open windows stay and its new watermark fires them
      Given keyed watermarks with a bounded delay of 0 ms and tumbling windows of 10 ms
      When these events arrive in one batch:
        | key | event_time | value |
        | a   | 1          | 1     |
      And key a is removed
      And these events arrive in the next batch:
        | key | event_time | value |
        | a   | 3          | 2     |
      And these events arrive in the next batch:
        | key | event_time | value |
        | a   | 10         | 4     |
      Then the windows are:
        | batch | key | window_start | window_end | count | sum |
        | 3     | a   | 0            | 10         | 2     | 3   |

  Rule: The stream

    @F065-R22 @TR-5
    Scenario: Every batch reports progress, empty ones too, and a key change only when the key changed
      Given keyed watermarks with a bounded delay of 5000 ms
      When an empty batch passes
      And these events arrive in the next batch:
        | key | event_time |
        | a   | 10000      |
      And an empty batch passes
      And these items arrive in the next batch:
        | kind  | key | event_time |
        | idle  | a   |            |
        | event | a   | 2000       |
      Then the progress is:
        | batch | global_watermark | total_keys | active_keys | idle_keys | evicted_keys | global_advances | key_advances |
        | 0     | -                | 0          | 0           | 0         | 0            | 0               | 0            |
        | 1     | 5000             | 1          | 1           | 0         | 0            | 1               | 1            |
        | 2     | 5000             | 1          | 1           | 0         | 0            | 1               | 1            |
        | 3     | 5000             | 1          | 1           | 0         | 0            | 1               | 1            |
      And the key changes are:
        | batch | key | watermark | state  |
        | 1     | a   | 5000      | active |
      And the verdicts in batch 3 are:
        | batch | seq | key | event_time | key_watermark | verdict |
        | 3     | 1   | a   | 2000       | 5000          | late    |

    @F065-R23 @F065-R22 @TR-7 @TR-3
    Scenario: Malformed items become error rows and change nothing
      Given keyed watermarks with a bounded delay of 5000 ms
      When these items arrive in one batch:
        | kind       | key | event_time | time |
        | event      | a   | 10000      |      |
        | clock      |     |            |      |
        | event      | a   |            |      |
        | event      |     | 5000       |      |
        | idle       |     |            |      |
        | remove_key |     |            |      |
        | clock      |     |            | 500  |
        | clock      |     |            | 400  |
      Then the errors are:
        | batch | seq | reason               |
        | 0     | 1   | missing_time         |
        | 0     | 2   | missing_event_time   |
        | 0     | 3   | missing_key          |
        | 0     | 4   | missing_key          |
        | 0     | 5   | missing_key          |
        | 0     | 7   | clock_went_backwards |
      And the verdicts are:
        | batch | seq | key | event_time | key_watermark | verdict |
        | 0     | 0   | a   | 10000      | -             | on time |
      And the key watermarks are:
        | key | watermark | state  |
        | a   | 5000      | active |

    @F065-R23 @TR-3
    Scenario: An item of a kind this area does not accept is an error row
      Given keyed watermarks with a bounded delay of 1000 ms
      When these items arrive in one batch:
        | kind      | key | event_time | time |
        | event     | a   | 5000       |      |
        | watermark | a   |            | 9000 |
        | event     | a   | 3000       |      |
      Then the errors are:
        | batch | seq | reason           |
        | 0     | 1   | unsupported_item |
      And the key watermarks are:
        | key | watermark |
        | a   | 4000      |

    @F065-R23 @F065-R22 @F065-R8
    Scenario: An error row ends the current segment
      Given keyed watermarks with a bounded delay of 5000 ms
      When these items arrive in one batch:
        | kind  | key | event_time |
        | event | a   | 10000      |
        | event |     | 1          |
        | event | a   | 30000      |
      Then the errors are:
        | batch | seq | reason      |
        | 0     | 1   | missing_key |
      And the progress is:
        | batch | global_watermark | global_advances |
        | 0     | 25000            | 2               |

    @TR-15 @F065-R23 @F065-R22 @F065-R8
    Scenario: Every row of a repeated seq is a duplicate_seq error row, which ends the segment
      Two rows of the table carried seq 1: neither can be placed before the other, so both
      are error rows, and the events around them are two segments, two global advances.
      Given keyed watermarks with a bounded delay of 5000 ms
      When these items arrive in one batch:
        | kind          | key | event_time |
        | event         | a   | 10000      |
        | duplicate_seq |     |            |
        | duplicate_seq |     |            |
        | event         | a   | 30000      |
      Then the errors are:
        | batch | seq | reason        |
        | 0     | 1   | duplicate_seq |
        | 0     | 2   | duplicate_seq |
      And the progress is:
        | batch | global_watermark | global_advances |
        | 0     | 25000            | 2               |

    @TR-15 @F065-R38 @F065-R23 @TR-14
    Scenario: After the end, rows of a repeated seq are after_end rows
      Given keyed watermarks with a bounded delay of 1000 ms
      When these items arrive in one batch:
        | kind          | key | event_time |
        | event         | a   | 5000       |
        | end           |     |            |
        | duplicate_seq |     |            |
        | duplicate_seq |     |            |
      Then the errors are:
        | batch | seq | reason    |
        | 0     | 2   | after_end |
        | 0     | 3   | after_end |

    @F065-R23 @F065-R10 @TR-4
    Scenario: A clock that goes backwards is an error and does not move the clock
      Given keyed watermarks with a bounded delay of 5000 ms and an idle timeout of 1000 ms
      When these items arrive in one batch:
        | kind  | key | event_time | time |
        | clock |     |            | 500  |
        | clock |     |            | 100  |
        | event | a   | 10000      |      |
      And the processing clock advances to 1200 ms
      Then the errors are:
        | batch | seq | reason               |
        | 0     | 1   | clock_went_backwards |
      And the key watermarks are:
        | key | watermark | state  |
        | a   | 5000      | active |
      When the processing clock advances to 1501 ms
      Then the key watermarks are:
        | key | watermark | state |
        | a   | 5000      | idle  |

    @F065-R24 @F065-R21 @F065-R13 @F065-R10 @F065-R7 @TR-5
    Scenario Outline: A restart after any batch keeps keys, clock, counters, eviction order and open windows
      Given keyed watermarks with a bounded delay of 5000 ms, an idle timeout of 1000 ms, at most 2 keys evicting LeastRecentlyActive and tumbling windows of 10000 ms
      When these events arrive in one batch:
        | key | event_time | value |
        | a   | 1000       | 1     |
        | b   | 20000      | 2     |
      And the engine <action>
      And the processing clock advances to 600 ms
      And the engine <action>
      And these events arrive in the next batch:
        | key | event_time | value |
        | a   | 16000      | 4     |
        | c   | 5000       | 8     |
      And the engine <action>
      And the processing clock advances to 1601 ms
      Then the windows are:
        | batch | key | window_start | window_end | count | sum |
        | 2     | a   | 0            | 10000      | 1     | 1   |
      And the verdicts are:
        | batch | key | event_time | key_watermark | verdict |
        | 0     | a   | 1000       | -             | on time |
        | 0     | b   | 20000      | -             | on time |
        | 2     | a   | 16000      | -4000         | on time |
        | 2     | c   | 5000       | -             | on time |
      And the key watermarks are:
        | key | watermark | state |
        | a   | 11000     | idle  |
        | c   | 0         | idle  |
      And the progress is:
        | batch | global_watermark | total_keys | active_keys | idle_keys | evicted_keys | global_advances | key_advances |
        | 0     | -4000            | 2          | 2           | 0         | 0            | 1               | 2            |
        | 1     | -4000            | 2          | 2           | 0         | 0            | 1               | 2            |
        | 2     | 0                | 2          | 2           | 0         | 1            | 2               | 4            |
        | 3     | 11000            | 2          | 0           | 2         | 1            | 3               | 4            |

      Examples:
        | action                         |
        | restarts from its checkpoint   |
        | keeps running                  |

    @F065-R39 @F065-R3 @F065-R8 @F065-R16 @F065-R21 @F065-R22 @TR-5
    Scenario: The same events in one batch give the same verdicts and windows, and one global advance for three
      The events of the first windows scenario, no longer cut into three batches. Each is still
      judged by k's watermark just before it, so 10500 is late by 11000; the windows [0, 10000)
      and [10000, 20000) still fire with the same counts and sums, both now at the end of the
      one segment, where k's watermark is 20000. Only the global advances differ: three batches
      were three updates, each raising the global watermark (to 7000, 11000 and 20000); one
      batch is one update, from none to 20000, so one advance. Five events raised k's
      watermark either way.
      Given keyed watermarks with a bounded delay of 5000 ms and tumbling windows of 10000 ms
      When these events arrive in one batch:
        | key | event_time | value |
        | k   | 1000       | 1     |
        | k   | 9000       | 2     |
        | k   | 12000      | 4     |
        | k   | 16000      | 8     |
        | k   | 10500      | 16    |
        | k   | 25000      | 32    |
      Then the verdicts are:
        | batch | seq | key | event_time | key_watermark | verdict |
        | 0     | 0   | k   | 1000       | -             | on time |
        | 0     | 1   | k   | 9000       | -4000         | on time |
        | 0     | 2   | k   | 12000      | 4000          | on time |
        | 0     | 3   | k   | 16000      | 7000          | on time |
        | 0     | 4   | k   | 10500      | 11000         | late    |
        | 0     | 5   | k   | 25000      | 11000         | on time |
      And the windows are:
        | batch | key | window_start | window_end | count | sum |
        | 0     | k   | 0            | 10000      | 2     | 3   |
        | 0     | k   | 10000        | 20000      | 2     | 12  |
      And the key changes are:
        | batch | key | watermark | state  |
        | 0     | k   | 20000     | active |
      And the progress is:
        | batch | global_watermark | total_keys | active_keys | idle_keys | evicted_keys | global_advances | key_advances |
        | 0     | 20000            | 1          | 1           | 0         | 0            | 1               | 5            |

  Rule: The end of the stream

    @F065-R38 @F065-R21 @F065-R9 @F065-R17 @F065-R23 @F065-R24 @TR-14 @TR-5
    Scenario Outline: The end fires the open windows of active, idle and removed keys, and moves no watermark
      a's first window fires by a's own watermark (15 reaches 10); the end then fires
      a's second window, idle b's and removed c's, none of which any watermark reached.
      Keys and watermarks stay as they were; later items are after_end.
      Given keyed watermarks with a bounded delay of 0 ms and tumbling windows of 10 ms
      When these items arrive in one batch:
        | kind       | key | event_time | value |
        | event      | a   | 1          | 1     |
        | event      | b   | 2          | 2     |
        | event      | c   | 3          | 4     |
        | idle       | b   |            |       |
        | remove_key | c   |            |       |
      And the engine <action>
      And these items arrive in the next batch:
        | kind  | key | event_time | value |
        | event | a   | 15         | 8     |
        | end   |     |            |       |
        | event | a   | 30         | 16    |
        | idle  | a   |            |       |
      And the engine <action>
      And these events arrive in the next batch:
        | key | event_time |
        | b   | 100        |
      Then the windows are:
        | batch | key | window_start | window_end | count | sum |
        | 1     | a   | 0            | 10         | 1     | 1   |
        | 1     | a   | 10           | 20         | 1     | 8   |
        | 1     | b   | 0            | 10         | 1     | 2   |
        | 1     | c   | 0            | 10         | 1     | 4   |
      And the errors are:
        | batch | seq | reason    |
        | 1     | 2   | after_end |
        | 1     | 3   | after_end |
        | 2     | 0   | after_end |
      And the key changes in batch 1 are:
        | batch | key | watermark | state  |
        | 1     | a   | 15        | active |
      And the key changes in batch 2 are:
        | batch | key | watermark | state |
      And the key watermarks are:
        | key | watermark | state  |
        | a   | 15        | active |
        | b   | 2         | idle   |
      And the progress is:
        | batch | global_watermark | total_keys | active_keys | idle_keys | global_advances | key_advances |
        | 0     | 1                | 2          | 1           | 1         | 1               | 3            |
        | 1     | 15               | 2          | 1           | 1         | 2               | 4            |
        | 2     | 15               | 2          | 1           | 1         | 2               | 4            |

      Examples:
        | action                       |
        | restarts from its checkpoint |
        | keeps running                |

    @F065-R38 @F065-R23 @F065-R26 @TR-14
    Scenario Outline: Without windows the end changes nothing but the after_end errors (<tracker>)
      Given keyed watermarks configured with:
        | setting       | value     |
        | bounded_delay | 1000      |
        | <setting>     | <value>   |
      When these items arrive in one batch:
        | kind  | key | event_time |
        | event | a   | 5000       |
        | end   |     |            |
        | event | a   | 9000       |
      When the input ends
      Then the verdicts are:
        | batch | seq | key | event_time | key_watermark | verdict |
        | 0     | 0   | a   | 5000       | -             | on time |
      And the errors are:
        | batch | seq | reason    |
        | 0     | 2   | after_end |
        | 1     | 0   | after_end |
      And the key watermarks are:
        | key | watermark | state  |
        | a   | 4000      | active |
      And no windows fire
      And the progress is:
        | batch | global_watermark | total_keys | global_advances | key_advances |
        | 0     | 4000             | 1          | 1               | 1            |
        | 1     | 4000             | 1          | 1               | 1            |

      Examples:
        | tracker | setting         | value |
        | keyed   | idle_timeout    | 60000 |
        | compact | exact_key_count | 2     |

  Rule: The object API (oracle-only)

    @oracle-only @F065-R18 @F065-R8 @TR-10
    Scenario: recalculate_global only returns the current global watermark
      recalculate_global is an API call with no streaming meaning (TR-10): a stream
      recomputes the global watermark after every item anyway.
      Given a KeyedWatermarkTracker with a bounded delay of 5000 ms
      When the tracker updates key a at 10000 ms
      And the tracker updates key b at 20000 ms
      And the tracker marks key a idle
      Then the call returns 15000
      When recalculate_global is called
      Then the call returns 15000
      And the global watermark is 15000
      And the metrics are:
        | metric          | value |
        | global_advances | 2     |

    @oracle-only @F065-R17 @F065-R5 @F065-R19
    Scenario: clear forgets every key but keeps the counters
      clear() has no stream item (TR-10, F065-R17); a stream removes keys one by one.
      Given a KeyedWatermarkTracker with a bounded delay of 5000 ms and at most 1 key evicting LeastRecentlyActive
      When the tracker updates key a at 10000 ms
      And the tracker updates key b at 20000 ms
      And the tracker is cleared
      Then the global watermark is none
      And the key watermarks are:
        | key | watermark |
      And the metrics are:
        | metric          | value |
        | total_keys      | 0     |
        | active_keys     | 0     |
        | idle_keys       | 0     |
        | evicted_keys    | 1     |
        | global_advances | 2     |
        | key_advances    | 2     |

    @oracle-only @F065-R15 @F065-R16
    Scenario: update_batch applies every event, then raises MaxKeysReached for the refused keys
      The exception is how the object API reports a refusal; a stream reports the
      verdict "rejected" instead, which every engine shows (F065-R15).
      Given a KeyedWatermarkTracker with a bounded delay of 5000 ms and at most 1 key under RejectNew
      When the tracker updates a batch:
        | key | event_time |
        | a   | 10000      |
        | b   | 20000      |
        | a   | 30000      |
      Then the call raises MaxKeysReached for keys: b
      And the key watermarks are:
        | key | watermark |
        | a   | 25000     |
      And the metrics are:
        | metric          | value |
        | total_keys      | 1     |
        | global_advances | 1     |
        | key_advances    | 2     |
      When the tracker updates key c at 1000 ms
      Then the call raises MaxKeysReached for keys: c
      And the global watermark is 25000
      And the metrics are:
        | metric          | value |
        | total_keys      | 1     |
        | global_advances | 1     |
        | key_advances    | 2     |

    @oracle-only @F065-R8 @F065-R16 @F065-R17
    Scenario: Calls return the new global watermark only when they advance it
      Return values are part of the object API; a stream shows advances as the
      global_advances counter instead (F065-R8).
      Given a KeyedWatermarkTracker with a bounded delay of 5000 ms
      When the tracker updates a batch:
        | key | event_time |
        | a   | 10000      |
        | b   | 20000      |
        | a   | 30000      |
      Then the call returns 15000
      When the tracker updates key b at 19000 ms
      Then the call returns none
      When the tracker updates key c at 1000 ms
      Then the call returns none
      And the global watermark is -4000
      When the tracker removes key c
      Then the global watermark is 15000
      And the metrics are:
        | metric          | value |
        | global_advances | 2     |

  Rule: The compact tracker
    A stream whose configuration names exact_key_count holds at most that many keys
    exactly (per shard: exact_key_count // shards) and answers for every other key from
    a max sketch, whose cells keep the highest event time of the keys hashed to them.
    Hashes cannot be worked by hand: each scenario states the hash facts its expected
    tables rely on as Given steps, and those steps check them. A sketch_error_rate of
    0.99 gives a sketch 3 wide (ceil(e / 0.99)), so small scenarios collide on purpose.
    The frequency counts of these scenarios stay below the aging period of
    10 * (exact_key_count // shards) events unless the scenario says otherwise.

    @F065-R26 @F065-R30 @F065-R32 @F065-R34 @F065-R35
    Scenario: While there is room every key enters the exact set and is judged as by the keyed tracker
      Given keyed watermarks configured with:
        | setting           | value |
        | bounded_delay     | 1000  |
        | exact_key_count   | 2     |
        | sketch_error_rate | 0.99  |
        | sketch_depth      | 1     |
      And the keys "a" and "b" fall in distinct registers of the key estimate
      When these events arrive in one batch:
        | key | event_time |
        | a   | 10000      |
        | b   | 20000      |
        | a   | 8000       |
      Then the verdicts are:
        | key | event_time | key_watermark | verdict |
        | a   | 10000      | -             | on time |
        | b   | 20000      | -             | on time |
        | a   | 8000       | 9000          | late    |
      And the key changes are:
        | batch | key | watermark | state  |
        | 0     | a   | 9000      | active |
        | 0     | b   | 19000     | active |
      And the progress is:
        | batch | global_watermark | total_keys | active_keys | idle_keys | evicted_keys | global_advances | key_advances | estimated_keys |
        | 0     | 9000             | 2          | 2           | 0         | 0            | 1               | 2            | 2              |

    @F065-R35 @F065-R22
    Scenario: A stream without exact_key_count reports no key estimate
      Given keyed watermarks with a bounded delay of 1000 ms
      When these events arrive in one batch:
        | key | event_time |
        | a   | 10000      |
        | b   | 20000      |
      Then the progress is:
        | batch | total_keys | estimated_keys |
        | 0     | 2          | -              |

    @F065-R28 @F065-R29 @F065-R30 @F065-R35 @F065-R32
    Scenario: A candidate enters a full exact set only with a strictly higher count, and the victim's time goes to the sketch
      One exact key. b's first event ties with a (count 1 against 1): the incumbent stays,
      and b's time is written to its cell. b's second event counts 2 against 1: a is demoted
      (its maximum 10000 written to its cell, state sketched) and b enters with the estimate it
      had (5000, watermark 4000), so b at 3000 is late, as the keyed tracker says too. Then a
      comes back the same way, judged by its cell: on time at 9500, late at 8500.
      Given keyed watermarks configured with:
        | setting           | value |
        | bounded_delay     | 1000  |
        | exact_key_count   | 1     |
        | sketch_error_rate | 0.99  |
        | sketch_depth      | 1     |
      And the key "a" shares no cell with "b"
      And the keys "a" and "b" fall in distinct registers of the key estimate
      When these events arrive in one batch:
        | key | event_time |
        | a   | 10000      |
      And these events arrive in the next batch:
        | key | event_time |
        | b   | 5000       |
        | b   | 3000       |
      And these events arrive in the next batch:
        | key | event_time |
        | a   | 9500       |
        | a   | 8500       |
      Then the verdicts are:
        | batch | key | event_time | key_watermark | verdict |
        | 0     | a   | 10000      | -             | on time |
        | 1     | b   | 5000       | -             | on time |
        | 1     | b   | 3000       | 4000          | late    |
        | 2     | a   | 9500       | 9000          | on time |
        | 2     | a   | 8500       | 9000          | late    |
      And the key changes are:
        | batch | key | watermark | state    |
        | 0     | a   | 9000      | active   |
        | 1     | a   | -         | sketched |
        | 1     | b   | 4000      | active   |
        | 2     | a   | 9000      | active   |
        | 2     | b   | -         | sketched |
      And the progress is:
        | batch | global_watermark | total_keys | evicted_keys | global_advances | key_advances | estimated_keys |
        | 0     | 9000             | 1          | 0            | 1               | 1            | 1              |
        | 1     | 4000             | 1          | 1            | 1               | 2            | 2              |
        | 2     | 9000             | 1          | 2            | 2               | 2            | 2              |

    @F065-R29 @F065-R30 @F065-R32 @F065-R33
    Scenario: An on-time event is called late only because another key shares its cell in every row
      b holds the one exact place with a count of 3. a stays out and writes 20000 into
      its two cells. c has never been seen, but its cells are a's in both rows, so its
      estimate is 20000 and c at 5000 is late (the keyed tracker calls it on time: the
      compact tracker errs only in this direction). j shares a's cell in row 0 only; its
      row-1 cell is empty, so it has no estimate and is on time. Then that cell holds j's own
      5000, and j's estimate is the lower of its cells: 5000, so j at 4500 is on time.
      Given keyed watermarks configured with:
        | setting           | value |
        | bounded_delay     | 1000  |
        | exact_key_count   | 1     |
        | sketch_error_rate | 0.99  |
        | sketch_depth      | 2     |
      And the keys "a" and "c" share their cell in every row of a sketch 3 wide and 2 deep
      And the keys "a" and "j" share their cell in row 0 only
      And the key "b" shares no cell with "a", "c" or "j"
      And the keys "a", "b", "c" and "j" fall in distinct registers of the key estimate
      When these events arrive in one batch:
        | key | event_time |
        | b   | 1000       |
        | b   | 2000       |
        | b   | 3000       |
      And these events arrive in the next batch:
        | key | event_time |
        | a   | 20000      |
      And these events arrive in the next batch:
        | key | event_time |
        | c   | 5000       |
        | j   | 5000       |
        | j   | 4500       |
      Then the verdicts are:
        | batch | key | event_time | key_watermark | verdict |
        | 0     | b   | 1000       | -             | on time |
        | 0     | b   | 2000       | 0             | on time |
        | 0     | b   | 3000       | 1000          | on time |
        | 1     | a   | 20000      | -             | on time |
        | 2     | c   | 5000       | 19000         | late    |
        | 2     | j   | 5000       | -             | on time |
        | 2     | j   | 4500       | 4000          | on time |
      And the key changes are:
        | batch | key | watermark | state  |
        | 0     | b   | 2000      | active |
      And the progress is:
        | batch | global_watermark | total_keys | evicted_keys | estimated_keys |
        | 0     | 2000             | 1          | 0            | 1              |
        | 1     | 2000             | 1          | 0            | 2              |
        | 2     | 2000             | 1          | 0            | 4              |

    @F065-R28 @F065-R30
    Scenario: Aging halves the counts, so a candidate overtakes a key that went quiet
      One exact key, so the counts are halved after every 10th event. a's 8 events
      count 8. The 10th event (b's second) halves a's count to 4 and b's to 1 before b
      is judged. b's 5th event brings it to 4: a tie, a stays. b's 6th makes 5 > 4 and
      b enters; without aging it would have needed a 9th event.
      Given keyed watermarks configured with:
        | setting           | value |
        | bounded_delay     | 0     |
        | exact_key_count   | 1     |
        | sketch_error_rate | 0.99  |
        | sketch_depth      | 1     |
      And the key "a" shares no cell with "b"
      When these events arrive in one batch:
        | key | event_time |
        | a   | 1000       |
        | a   | 2000       |
        | a   | 3000       |
        | a   | 4000       |
        | a   | 5000       |
        | a   | 6000       |
        | a   | 7000       |
        | a   | 8000       |
      And these events arrive in the next batch:
        | key | event_time |
        | b   | 500        |
        | b   | 600        |
        | b   | 700        |
        | b   | 800        |
        | b   | 900        |
      Then the verdicts in the last batch are:
        | key | event_time | key_watermark | verdict |
        | b   | 500        | -             | on time |
        | b   | 600        | 500           | on time |
        | b   | 700        | 600           | on time |
        | b   | 800        | 700           | on time |
        | b   | 900        | 800           | on time |
      And the key changes in the last batch are:
        | batch | key | watermark | state |
      When these events arrive in the next batch:
        | key | event_time |
        | b   | 1000       |
      Then the verdicts in the last batch are:
        | key | event_time | key_watermark | verdict |
        | b   | 1000       | 900           | on time |
      And the key changes in the last batch are:
        | batch | key | watermark | state    |
        | 2     | a   | -         | sketched |
        | 2     | b   | 1000      | active   |
      And the progress is:
        | batch | global_watermark | total_keys | evicted_keys |
        | 0     | 8000             | 1          | 0            |
        | 1     | 8000             | 1          | 0            |
        | 2     | 1000             | 1          | 1            |

    @F065-R31 @F065-R5 @F065-R7 @F065-R9 @F065-R10 @F065-R17
    Scenario: Idle marks, the idle timeout and removal concern exact keys only, and so does the global watermark
      b never enters the exact set (1 event against a's 2). Its estimate (watermark 1000)
      does not hold the global watermark down; marking it idle or removing it changes
      nothing, and after the removal it is still judged by its cell (the keyed tracker
      would have forgotten it). The idle timeout idles only a.
      Given keyed watermarks configured with:
        | setting           | value |
        | bounded_delay     | 1000  |
        | idle_timeout      | 500   |
        | exact_key_count   | 1     |
        | sketch_error_rate | 0.99  |
        | sketch_depth      | 1     |
      And the key "a" shares no cell with "b"
      And the keys "a" and "b" fall in distinct registers of the key estimate
      When these events arrive in one batch:
        | key | event_time |
        | a   | 10000      |
        | a   | 11000      |
        | b   | 2000       |
      And key b is marked idle
      And key b is removed
      And these events arrive in the next batch:
        | key | event_time |
        | b   | 500        |
      And the processing clock advances to 600 ms
      Then the verdicts are:
        | batch | key | event_time | key_watermark | verdict |
        | 0     | a   | 10000      | -             | on time |
        | 0     | a   | 11000      | 9000          | on time |
        | 0     | b   | 2000       | -             | on time |
        | 3     | b   | 500        | 1000          | late    |
      And the key changes are:
        | batch | key | watermark | state  |
        | 0     | a   | 10000     | active |
        | 4     | a   | 10000     | idle   |
      And the progress is:
        | batch | global_watermark | total_keys | active_keys | idle_keys | evicted_keys | global_advances | key_advances | estimated_keys |
        | 0     | 10000            | 1          | 1           | 0         | 0            | 1               | 3            | 2              |
        | 1     | 10000            | 1          | 1           | 0         | 0            | 1               | 3            | 2              |
        | 2     | 10000            | 1          | 1           | 0         | 0            | 1               | 3            | 2              |
        | 3     | 10000            | 1          | 1           | 0         | 0            | 1               | 3            | 2              |
        | 4     | 10000            | 1          | 0           | 1         | 0            | 1               | 3            | 2              |

    @F065-R35 @F065-R31 @F065-R30 @F065-R17
    Scenario: The keys table names a key's last departure in the batch, and removal writes nothing to the sketch
      In batch 1, a is demoted by b, comes back by demoting b (b entered and left within
      the batch: no row), and is removed: its row says removed. a's exact maximum 1600 was
      never written (removal writes nothing): its cell holds 1500, from its event while it
      was out, so a at 1550 is on time in batch 2; b's cell holds its demoted 2000.
      Given keyed watermarks configured with:
        | setting           | value |
        | bounded_delay     | 0     |
        | exact_key_count   | 1     |
        | sketch_error_rate | 0.99  |
        | sketch_depth      | 1     |
      And the key "a" shares no cell with "b"
      And the keys "a" and "b" fall in distinct registers of the key estimate
      When these events arrive in one batch:
        | key | event_time |
        | a   | 1000       |
      And these items arrive in the next batch:
        | kind       | key | event_time |
        | event      | b   | 2000       |
        | event      | b   | 2000       |
        | event      | a   | 1500       |
        | event      | a   | 1600       |
        | remove_key | a   |            |
      Then the verdicts in the last batch are:
        | key | event_time | key_watermark | verdict |
        | b   | 2000       | -             | on time |
        | b   | 2000       | 2000          | on time |
        | a   | 1500       | 1000          | on time |
        | a   | 1600       | 1500          | on time |
      And the key changes in the last batch are:
        | batch | key | watermark | state   |
        | 1     | a   | -         | removed |
      When these events arrive in the next batch:
        | key | event_time |
        | a   | 1550       |
        | b   | 1000       |
      Then the verdicts in the last batch are:
        | key | event_time | key_watermark | verdict |
        | a   | 1550       | 1500          | on time |
        | b   | 1000       | 2000          | late    |
      And the key changes in the last batch are:
        | batch | key | watermark | state  |
        | 2     | a   | 1550      | active |
      And the progress is:
        | batch | global_watermark | total_keys | evicted_keys | global_advances | key_advances | estimated_keys |
        | 0     | 1000             | 1          | 0            | 1               | 1            | 1              |
        | 1     | -                | 0          | 2            | 2               | 4            | 2              |
        | 2     | 1550             | 1          | 2            | 3               | 5            | 2              |

    @F065-R34
    Scenario Outline: The key estimate counts distinct keys, whatever the shards
      Five keys in five distinct registers leave 4091 registers at 0, and linear counting
      gives round(4096 * ln(4096 / 4091)) = 5; repeated keys add nothing. With two shards
      each shard counts its own keys and the estimates add up.
      Given keyed watermarks configured with:
        | setting         | value    |
        | bounded_delay   | 0        |
        | exact_key_count | 2        |
        | shards          | <shards> |
      And the keys "a", "b", "c", "d" and "e" fall in distinct registers of the key estimate
      When these events arrive in one batch:
        | key | event_time |
        | a   | 1000       |
        | b   | 2000       |
        | a   | 3000       |
      And these events arrive in the next batch:
        | key | event_time |
        | c   | 4000       |
        | d   | 5000       |
        | e   | 6000       |
      And these events arrive in the next batch:
        | key | event_time |
        | a   | 7000       |
        | b   | 8000       |
      Then the progress is:
        | batch | estimated_keys |
        | 0     | 2              |
        | 1     | 5              |
        | 2     | 5              |

      Examples:
        | shards |
        | 1      |
        | 2      |

    @F065-R27 @F065-R30
    Scenario Outline: A shard's exact set cannot lend its room to another shard
      Two exact places: one shard holds both, two shards hold one each. d and e are both
      in shard 0 of 2, so with two shards e finds shard 0 full (a tie keeps d) although
      shard 1 is empty; a, in shard 1, then enters there. With one shard e enters, and a
      ties with d, the least recently active key, and stays out.
      Given keyed watermarks configured with:
        | setting           | value    |
        | bounded_delay     | 0        |
        | exact_key_count   | 2        |
        | shards            | <shards> |
        | sketch_error_rate | 0.99     |
        | sketch_depth      | 1        |
      And the keys "d" and "e" are in shard 0 of 2
      And the key "a" is in shard 1 of 2
      And the keys "a", "d" and "e" share no cell
      When these events arrive in one batch:
        | key | event_time |
        | d   | 1000       |
        | e   | 2000       |
      And these events arrive in the next batch:
        | key | event_time |
        | a   | 3000       |
      Then the verdicts are:
        | batch | key | event_time | key_watermark | verdict |
        | 0     | d   | 1000       | -             | on time |
        | 0     | e   | 2000       | -             | on time |
        | 1     | a   | 3000       | -             | on time |
      And the progress is:
        | batch | global_watermark | total_keys | evicted_keys |
        | 0     | 1000             | <first>    | 0            |
        | 1     | 1000             | 2          | 0            |
      And the key watermarks are:
        | key      | watermark  |
        | d        | 1000       |
        | <second> | <second_wm> |

      Examples:
        | shards | first | second | second_wm |
        | 1      | 2     | e      | 2000      |
        | 2      | 1     | a      | 3000      |

    @F065-R36 @F065-R35 @F065-R34
    Scenario: The exact set never grows past exact_key_count, however many keys pass
      A key seen once and never again stays out (a tie at best), and a demoted key leaves
      no exact entry: total_keys stays at 1 while the estimate counts every key.
      Given keyed watermarks configured with:
        | setting         | value |
        | bounded_delay   | 0     |
        | exact_key_count | 1     |
      And the keys "a", "b", "c", "d" and "e" share no cell
      And the keys "a", "b", "c", "d" and "e" fall in distinct registers of the key estimate
      When these events arrive in one batch:
        | key | event_time |
        | a   | 1000       |
      And these events arrive in the next batch:
        | key | event_time |
        | b   | 2000       |
        | b   | 3000       |
      And these events arrive in the next batch:
        | key | event_time |
        | c   | 100        |
        | d   | 200        |
        | e   | 300        |
      Then the key changes are:
        | batch | key | watermark | state    |
        | 0     | a   | 1000      | active   |
        | 1     | a   | -         | sketched |
        | 1     | b   | 3000      | active   |
      And the progress is:
        | batch | total_keys | evicted_keys | estimated_keys |
        | 0     | 1          | 0            | 1              |
        | 1     | 1          | 1            | 2              |
        | 2     | 1          | 1            | 5              |

    @F065-R37 @F065-R24 @F065-R28 @F065-R29 @F065-R34 @TR-5
    Scenario Outline: A restart keeps the exact keys, both sketches and the registers
      If the restart lost the frequency counts, b's second event would tie instead of
      demoting a; if it lost the max sketch, b would enter with a fresh watermark and its
      event at 3000 would be on time, and a would not be judged by its demoted maximum.
      Given keyed watermarks configured with:
        | setting           | value |
        | bounded_delay     | 1000  |
        | exact_key_count   | 1     |
        | sketch_error_rate | 0.99  |
        | sketch_depth      | 1     |
      And the key "a" shares no cell with "b"
      And the keys "a" and "b" fall in distinct registers of the key estimate
      When these events arrive in one batch:
        | key | event_time |
        | a   | 10000      |
        | b   | 5000       |
      And the engine <action>
      And these events arrive in the next batch:
        | key | event_time |
        | b   | 3000       |
      And the engine <action>
      And these events arrive in the next batch:
        | key | event_time |
        | a   | 8000       |
      Then the verdicts are:
        | batch | key | event_time | key_watermark | verdict |
        | 0     | a   | 10000      | -             | on time |
        | 0     | b   | 5000       | -             | on time |
        | 1     | b   | 3000       | 4000          | late    |
        | 2     | a   | 8000       | 9000          | late    |
      And the key changes are:
        | batch | key | watermark | state    |
        | 0     | a   | 9000      | active   |
        | 1     | a   | -         | sketched |
        | 1     | b   | 4000      | active   |
      And the progress is:
        | batch | global_watermark | total_keys | evicted_keys | global_advances | key_advances | estimated_keys |
        | 0     | 9000             | 1          | 0            | 1               | 2            | 2              |
        | 1     | 4000             | 1          | 1            | 1               | 2            | 2              |
        | 2     | 4000             | 1          | 1            | 1               | 2            | 2              |

      Examples:
        | action                       |
        | restarts from its checkpoint |
        | keeps running                |

    @F065-R26 @TR-6
    Scenario Outline: A compact configuration that breaks a rule is refused before any event
      Given keyed watermarks configured with:
        | setting    | value    |
        | <setting1> | <value1> |
        | <setting2> | <value2> |
      When these events arrive in one batch:
        | key | event_time |
        | a   | 1000       |
      Then the configuration is rejected

      Examples:
        | setting1          | value1 | setting2          | value2          |
        | exact_key_count   | 2      | max_keys          | 2               |
        | exact_key_count   | 2      | window_size       | 1000            |
        | exact_key_count   | 2      | eviction_policy   | LowestWatermark |
        | exact_key_count   | 2      | eviction_policy   | Random          |
        | exact_key_count   | 2      | shards            | 3               |
        | exact_key_count   | 2      | shards            | 0               |
        | exact_key_count   | 2      | sketch_depth      | 7               |
        | exact_key_count   | 2      | sketch_depth      | 0               |
        | exact_key_count   | 2      | sketch_error_rate | 1               |
        | exact_key_count   | 2      | sketch_error_rate | 1.0             |
        | exact_key_count   | 2      | sketch_error_rate | 0               |
        | exact_key_count   | 2      | sketch_error_rate | 0.000009        |
        | exact_key_count   | 2      | sketch_error_rate | "0.5"           |
        | exact_key_count   | 0      | bounded_delay     | 1000            |
        | exact_key_count   | 1.5    | bounded_delay     | 1000            |
        | exact_key_count   | 2      | bounded_delay     | -1              |
        | sketch_depth      | 2      | bounded_delay     | 1000            |
        | sketch_error_rate | 0.5    | shards            | 1               |

    @F065-R26 @F065-R27
    Scenario: The limits of the compact settings are accepted
      A sketch 6 deep uses the last digest word (w7); as many shards as exact keys leaves
      one exact place per shard; an error rate just below 1 gives a sketch 3 wide.
      Given keyed watermarks configured with:
        | setting           | value   |
        | bounded_delay     | 0       |
        | idle_timeout      | 0       |
        | exact_key_count   | 3       |
        | shards            | 3       |
        | sketch_depth      | 6       |
        | sketch_error_rate | 0.99999 |
      And the key "a" is in shard 2 of 3
      And the key "b" is in shard 0 of 3
      And the keys "a" and "b" fall in distinct registers of the key estimate
      When these events arrive in one batch:
        | key | event_time |
        | a   | 1000       |
        | b   | 2000       |
      Then the verdicts are:
        | key | event_time | key_watermark | verdict |
        | a   | 1000       | -             | on time |
        | b   | 2000       | -             | on time |
      And the progress is:
        | batch | global_watermark | total_keys | estimated_keys |
        | 0     | 1000             | 2          | 2              |

    @oracle-only @F065-R31 @F065-R29 @F065-R17 @TR-10
    Scenario: clear puts every shard back to its start and keeps the counters
      clear() has no stream item (TR-10). Before it, b (kept out by a tie) is answered by
      its cell; after it, the cell is empty, so b enters afresh.
      Given a CompactKeyedWatermarkTracker configured with:
        | setting           | value |
        | bounded_delay     | 1000  |
        | exact_key_count   | 1     |
        | sketch_error_rate | 0.99  |
        | sketch_depth      | 1     |
      And the key "a" shares no cell with "b"
      When the tracker updates key a at 10000 ms
      Then the call returns 9000
      When the tracker updates key b at 5000 ms
      Then the call returns none
      And the tracker's watermark for key b is 4000
      And the tracker's watermark for key a is 9000
      When the tracker marks key b idle
      Then the call returns none
      And the key watermarks are:
        | key | watermark | state  |
        | a   | 9000      | active |
      When the tracker is cleared
      Then the tracker's watermark for key b is none
      And the global watermark is none
      And the metrics are:
        | metric          | value |
        | total_keys      | 0     |
        | evicted_keys    | 0     |
        | global_advances | 1     |
        | key_advances    | 2     |
        | estimated_keys  | 0     |
      When the tracker updates key b at 3000 ms
      Then the call returns 2000
      And the tracker's watermark for key b is 2000
