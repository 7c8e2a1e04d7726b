@OXL
Feature: Late data
  A watermark T of a source promises that its later events have times at or
  above T. An event below its source's watermark is late; the stream's policy
  drops it, moves it up to the watermark, or routes it to a side channel, unless
  an allowed-lateness budget keeps its window open. Clauses: spec/late_data.md.

  Times are milliseconds. Batches are numbered from 0 as in the output tables:
  each When step that adds items is one new batch unless it says "in the same
  batch" (see harness/steps.py). Watermarks arrive as items of the stream; an
  empty source cell is the stream's unnamed source. "-" in an expected table is
  null.

  Rule: The watermark an event is judged against

    @OXL-R1 @OXL-R4 @OXL-R5 @OXL-R6 @OXL-R9
    Scenario: An event at the watermark is on time, one millisecond below it is late
      Events never move the watermark: after an event at 50000 the watermark is still
      10000, so an event at 11000 stays on time.
      Given late data configured with:
        | setting | value |
        | policy  | Drop  |
      When source 1 reports watermark 10000 ms
      And these events arrive in the next batch:
        | source | event_time |
        | 1      | 10000      |
        | 1      | 9999       |
        | 1      | 50000      |
        | 1      | 11000      |
      Then the verdicts in the last batch are:
        | seq | source | event_time | watermark | verdict | lateness | assigned_time |
        | 0   | 1      | 10000      | 10000     | on time | -        | 10000         |
        | 1   | 1      | 9999       | 10000     | dropped | 1        | -             |
        | 2   | 1      | 50000      | 10000     | on time | -        | 50000         |
        | 3   | 1      | 11000      | 10000     | on time | -        | 11000         |
      And the progress is:
        | batch | on_time | allowed_late | reassigned | dropped | side_output | open_windows |
        | 0     | 0       | 0            | 0          | 0       | 0           | 0            |
        | 1     | 3       | 0            | 0          | 1       | 0           | 0            |

    @OXL-R2 @OXL-R4
    Scenario: Each event is judged by its own source's watermark, the unnamed source included
      Source 1 runs ahead of source 2; the unnamed source (no source column) has its own
      watermark, and none until its first watermark item.
      Given late data with the default configuration
      When these watermarks arrive in one batch:
        | source | time  |
        | 1      | 10000 |
        | 2      | 2000  |
      And these events arrive in the next batch:
        | source | event_time |
        | 2      | 5000       |
        | 1      | 5000       |
        |        | 5000       |
      And these items arrive in the next batch:
        | kind      | source | event_time | time |
        | watermark |        |            | 6000 |
        | event     |        | 5000       |      |
        | event     | 2      | 5000       |      |
      Then the verdicts are:
        | batch | seq | source | event_time | watermark | verdict |
        | 1     | 0   | 2      | 5000       | 2000      | on time |
        | 1     | 1   | 1      | 5000       | 10000     | dropped |
        | 1     | 2   | -      | 5000       | -         | on time |
        | 2     | 1   | -      | 5000       | 6000      | dropped |
        | 2     | 2   | 2      | 5000       | 2000      | on time |

    @OXL-R3 @OXL-R16
    Scenario: A watermark item counts from its place in the batch, and a lower one is refused
      The event before the watermark item in the same batch has no watermark yet; the one
      after it is judged by it. An equal watermark is accepted; a lower one is an error row
      and the promise of the higher one stands.
      Given late data with the default configuration
      When these items arrive in one batch:
        | kind      | source | event_time | time |
        | event     | 1      | 100        |      |
        | watermark | 1      |            | 1000 |
        | event     | 1      | 100        |      |
        | watermark | 1      |            | 1000 |
        | watermark | 1      |            | 500  |
        | event     | 1      | 700        |      |
      Then the verdicts are:
        | seq | event_time | watermark | verdict |
        | 0   | 100        | -         | on time |
        | 2   | 100        | 1000      | dropped |
        | 5   | 700        | 1000      | dropped |
      And the errors are:
        | batch | seq | reason              |
        | 0     | 4   | watermark_regressed |

    @OXL-R4 @TR-2
    Scenario: Before any watermark nothing is late, not even the earliest time
      Given late data with the default configuration
      When these events arrive in one batch:
        | source | event_time |
        | 3      | I64_MIN    |
      And source 3 reports watermark I64_MIN ms
      And these events arrive in the next batch:
        | source | event_time |
        | 3      | I64_MIN    |
      Then the verdicts are:
        | batch | source | event_time | watermark | verdict | assigned_time |
        | 0     | 3      | I64_MIN    | -         | on time | I64_MIN       |
        | 2     | 3      | I64_MIN    | I64_MIN   | on time | I64_MIN       |

  Rule: Policies

    @OXL-R5 @OXL-R7 @OXL-R9
    Scenario: Reassign keeps an event late by at most the budget, at the watermark
      The seed's table: Reassign(watermark) if lateness <= budget, else Drop.
      Given late data configured with:
        | setting      | value    |
        | policy       | Reassign |
        | max_lateness | 500      |
      When the watermark reaches 10000 ms
      And these events arrive in the next batch:
        | event_time |
        | 9500       |
        | 9499       |
        | 10000      |
        | 9999       |
      Then the verdicts in the last batch are:
        | seq | event_time | watermark | verdict    | lateness | assigned_time |
        | 0   | 9500       | 10000     | reassigned | 500      | 10000         |
        | 1   | 9499       | 10000     | dropped    | 501      | -             |
        | 2   | 10000      | 10000     | on time    | -        | 10000         |
        | 3   | 9999       | 10000     | reassigned | 1        | 10000         |

    @OXL-R7
    Scenario: A budget of zero reassigns nothing
      Given late data configured with:
        | setting      | value    |
        | policy       | Reassign |
        | max_lateness | 0        |
      When the watermark reaches 10000 ms
      And these events arrive in the next batch:
        | event_time |
        | 9999       |
        | 10000      |
      Then the verdicts in the last batch are:
        | event_time | verdict | lateness | assigned_time |
        | 9999       | dropped | 1        | -             |
        | 10000      | on time | -        | 10000         |

    @OXL-R5 @OXL-R7 @TR-2
    Scenario: Lateness beyond the time range is reported saturated but decided exactly
      The true lateness of I64_MIN under a watermark of I64_MAX is 2^64 - 1, above any
      budget; the column reports I64_MAX. An event at 0 is late by exactly I64_MAX.
      Given late data configured with:
        | setting      | value    |
        | policy       | Reassign |
        | max_lateness | I64_MAX  |
      When the watermark reaches I64_MAX ms
      And these events arrive in the next batch:
        | event_time |
        | I64_MIN    |
        | 0          |
      Then the verdicts in the last batch are:
        | event_time | watermark | verdict    | lateness | assigned_time |
        | I64_MIN    | I64_MAX   | dropped    | I64_MAX  | -             |
        | 0          | I64_MAX   | reassigned | I64_MAX  | I64_MAX       |

    @OXL-R8 @OXL-R9 @OXL-R13 @OXL-R14
    Scenario: Side outputs are drained every batch, in arrival order, with running positions
      Given late data configured with:
        | setting | value      |
        | policy  | SideOutput |
        | channel | late       |
      When the watermark reaches 1000 ms
      And these events arrive in the next batch:
        | event_time |
        | 300        |
        | 1200       |
        | 100        |
        | 200        |
      And these events arrive in the next batch:
        | event_time |
        | 999        |
      Then the judged events are:
        | batch | seq | event_time | verdict     | lateness | assigned_time | channel |
        | 1     | 0   | 300        | side_output | 700      | -             | late    |
        | 1     | 1   | 1200       | on time     | -        | 1200          | -       |
        | 1     | 2   | 100        | side_output | 900      | -             | late    |
        | 1     | 3   | 200        | side_output | 800      | -             | late    |
        | 2     | 0   | 999        | side_output | 1       | -             | late    |
      And the side outputs are:
        | batch | channel | position | seq | event_time |
        | 1     | late    | 0        | 0   | 300        |
        | 1     | late    | 1        | 2   | 100        |
        | 1     | late    | 2        | 3   | 200        |
        | 2     | late    | 3        | 0   | 999        |

    @OXL-R6 @OXL-R14 @OXL-R17
    Scenario: Dropped events keep their rows and never reach a side output
      Given late data with the default configuration
      When these items arrive in one batch:
        | kind      | event_time | time |
        | watermark |            | 500  |
        | event     | 100        |      |
        | event     | 600        |      |
      Then the verdicts are:
        | event_time | verdict |
        | 100        | dropped |
        | 600        | on time |
      And the side_outputs table is empty
      And the progress is:
        | batch | on_time | dropped |
        | 0     | 1       | 1       |

  Rule: Allowed lateness and windows

    @OXL-R10 @OXL-R11 @OXL-R12
    Scenario: An open window keeps a late event before the policy applies
      Window [0, 10000) stays open while the watermark is below 10000 + 2000. At 10500 an
      event at 3000 is late but kept; once the watermark reaches 12000 the window closes and
      the next event at 4000 goes to the side channel.
      Given late data configured with:
        | setting          | value      |
        | policy           | SideOutput |
        | channel          | too_late   |
        | window_size      | 10000      |
        | allowed_lateness | 2000       |
      When these items arrive in one batch:
        | kind      | source | event_time | time  |
        | event     | 1      | 1000       |       |
        | watermark | 1      |            | 10500 |
        | event     | 1      | 3000       |       |
      And these items arrive in the next batch:
        | kind      | source | event_time | time  |
        | watermark | 1      |            | 12000 |
        | event     | 1      | 4000       |       |
      Then the verdicts are:
        | batch | seq | event_time | watermark | verdict      | lateness | assigned_time |
        | 0     | 0   | 1000       | -         | on time      | -        | 1000          |
        | 0     | 2   | 3000       | 10500     | allowed late | 7500     | 3000          |
        | 1     | 1   | 4000       | 12000     | side output  | 8000     | -             |
      And the windows are:
        | batch | seq | source | window_start | window_end | watermark | count |
        | 1     | 0   | 1      | 0            | 10000      | 12000     | 2     |
      And the side outputs are:
        | batch | channel  | position | seq | source | event_time |
        | 1     | too_late | 0        | 1   | 1      | 4000       |
      And the progress is:
        | batch | on_time | allowed_late | side_output | open_windows |
        | 0     | 1       | 1            | 0           | 1            |
        | 1     | 1       | 1            | 1           | 0            |

    @OXL-R10 @OXL-R12
    Scenario: A window closes exactly when the watermark reaches its end plus the allowed lateness
      Given late data configured with:
        | setting          | value |
        | window_size      | 1000  |
        | allowed_lateness | 500   |
      When these events arrive in one batch:
        | event_time |
        | 100        |
        | 1100       |
      And the watermark reaches 1499 ms
      And these events arrive in the next batch:
        | event_time |
        | 999        |
      And the watermark reaches 1500 ms
      And these events arrive in the next batch:
        | event_time |
        | 999        |
      Then the verdicts are:
        | batch | event_time | watermark | verdict      |
        | 0     | 100        | -         | on time      |
        | 0     | 1100       | -         | on time      |
        | 2     | 999        | 1499      | allowed late |
        | 4     | 999        | 1500      | dropped      |
      And the windows are:
        | batch | seq | source | window_start | window_end | watermark | count |
        | 3     | 0   | -      | 0            | 1000       | 1500      | 2     |
      And the progress is:
        | batch | open_windows |
        | 0     | 2            |
        | 1     | 2            |
        | 2     | 2            |
        | 3     | 1            |
        | 4     | 1            |

    @OXL-R4 @OXL-R12 @TR-2
    Scenario: The window that holds the top of the time range never closes
      With windows of 7 ms, [I64_MAX - 7, I64_MAX) ends exactly at I64_MAX and closes at a
      watermark of I64_MAX, while the window holding I64_MAX itself has its end clamped there:
      an event at I64_MAX is on time under any watermark, so that window stays open and is
      counted once.
      Given late data configured with:
        | setting     | value |
        | window_size | 7     |
      When these events arrive in one batch:
        | event_time  |
        | I64_MAX - 1 |
        | I64_MAX     |
      And the watermark reaches I64_MAX ms
      And these events arrive in the next batch:
        | event_time |
        | I64_MAX    |
      Then the verdicts in the last batch are:
        | event_time | watermark | verdict |
        | I64_MAX    | I64_MAX   | on time |
      And the windows are:
        | batch | seq | source | window_start | window_end | watermark | count |
        | 1     | 0   | -      | I64_MAX - 7  | I64_MAX    | I64_MAX   | 1     |
      And the progress is:
        | batch | open_windows |
        | 0     | 2            |
        | 1     | 1            |
        | 2     | 1            |

    @OXL-R10 @TR-4
    Scenario: The processing clock closes no window
      Allowed lateness is measured in event time: however far the processing clock moves,
      the window stays open until the watermark passes its end plus the budget.
      Given late data configured with:
        | setting          | value |
        | window_size      | 1000  |
        | allowed_lateness | 500   |
      When these events arrive in one batch:
        | event_time |
        | 100        |
      And the processing clock advances to 1000000 ms
      And the watermark reaches 1200 ms
      And these events arrive in the next batch:
        | event_time |
        | 50         |
      Then the verdicts in the last batch are:
        | event_time | watermark | verdict      |
        | 50         | 1200      | allowed late |
      And the windows table is empty
      And the progress is:
        | batch | open_windows |
        | 0     | 1            |
        | 1     | 1            |
        | 2     | 1            |
        | 3     | 1            |

    @OXL-R2 @OXL-R7 @OXL-R12
    Scenario: A reassigned event counts in the watermark's window, and windows close by their own source
      Window size 1000, no allowed lateness: an event late for a closed window is reassigned
      to the watermark 2500, in window [2000, 3000). Source 2's watermark closes only
      source 2's windows.
      Given late data configured with:
        | setting      | value    |
        | policy       | Reassign |
        | max_lateness | 5000     |
        | window_size  | 1000     |
      When these items arrive in one batch:
        | kind      | source | event_time | time |
        | event     | 1      | 500        |      |
        | event     | 2      | 700        |      |
        | watermark | 1      |            | 2500 |
        | event     | 1      | 100        |      |
        | event     | 1      | 2600       |      |
      And these watermarks arrive in the next batch:
        | source | time |
        | 2      | 3000 |
        | 1      | 3000 |
      Then the verdicts in batch 0 are:
        | source | event_time | watermark | verdict    | lateness | assigned_time |
        | 1      | 500        | -         | on time    | -        | 500           |
        | 2      | 700        | -         | on time    | -        | 700           |
        | 1      | 100        | 2500      | reassigned | 2400     | 2500          |
        | 1      | 2600       | 2500      | on time    | -        | 2600          |
      And the windows are:
        | batch | seq | source | window_start | window_end | watermark | count |
        | 0     | 2   | 1      | 0            | 1000       | 2500      | 1     |
        | 1     | 0   | 2      | 0            | 1000       | 3000      | 1     |
        | 1     | 1   | 1      | 2000         | 3000       | 3000      | 2     |

    @OXL-R12
    Scenario: Windows of negative times start at the multiple of the size at or below the time
      Given late data configured with:
        | setting     | value |
        | window_size | 1000  |
      When these events arrive in one batch:
        | event_time |
        | -1         |
        | -1000      |
        | -1001      |
      And the watermark reaches -1 ms
      Then the windows are:
        | batch | seq | source | window_start | window_end | watermark | count |
        | 1     | 0   | -      | -2000        | -1000      | -1        | 1     |
      And the progress is:
        | batch | open_windows |
        | 0     | 2            |
        | 1     | 1            |

    @OXL-R12 @TR-2
    Scenario: Windows at the ends of the time range are clamped
      The first window starts at I64_MIN and closes like any other. The window of
      I64_MAX - 1 also holds I64_MAX: its end is clamped to I64_MAX and it never closes,
      not even at a watermark of I64_MAX, under which an event at I64_MAX is still on time.
      Given late data configured with:
        | setting          | value |
        | window_size      | 1000  |
        | allowed_lateness | 10    |
      When these events arrive in one batch:
        | event_time  |
        | I64_MAX - 1 |
        | I64_MIN     |
      And the watermark reaches I64_MAX - 1 ms
      And the watermark reaches I64_MAX ms
      Then the windows are:
        | batch | seq | source | window_start     | window_end    | watermark   | count |
        | 1     | 0   | -      | I64_MIN          | I64_MIN + 808 | I64_MAX - 1 | 1     |
      And the progress is:
        | batch | open_windows |
        | 0     | 2            |
        | 1     | 1            |
        | 2     | 1            |

  Rule: The stream

    @OXL-R15 @TR-6
    Scenario Outline: A configuration that breaks the rules is refused
      Given late data configured with:
        | setting   | value   |
        | <setting> | <value> |
        | <other>   | <more>  |
      Then the configuration is rejected

      Examples:
        | setting          | value      | other            | more  |
        | policy           | Later      | window_size      | 10    |
        | policy           | Reassign   | window_size      | 10    |
        | policy           | SideOutput | window_size      | 10    |
        | policy           | Drop       | max_lateness     | 10    |
        | policy           | Drop       | channel          | late  |
        | policy           | SideOutput | channel          | ""    |
        | policy           | SideOutput | channel          | 7     |
        | policy           | Reassign   | max_lateness     | -1    |
        | policy           | Reassign   | max_lateness     | 1.5   |
        | window_size      | 0          | allowed_lateness | 0     |
        | window_size      | 10         | allowed_lateness | -1    |
        | policy           | Drop       | allowed_lateness | 10    |
        | policy           | Drop       | lateness         | 10    |

    @OXL-R16 @TR-7 @TR-4
    Scenario: Malformed items are error rows and change nothing
      Given late data with the default configuration
      When these items arrive in one batch:
        | kind       | source | event_time | time | key |
        | watermark  | 1      |            | 1000 |     |
        | idle       |        |            |      | a   |
        | event      | 1      |            |      |     |
        | watermark  | 1      |            |      |     |
        | clock      |        |            |      |     |
        | clock      |        |            | 500  |     |
        | clock      |        |            | 400  |     |
        | watermark  | 1      |            | 900  |     |
        | event      | 1      | 950        |      |     |
      Then the errors are:
        | batch | seq | reason               |
        | 0     | 1   | unsupported_item     |
        | 0     | 2   | missing_event_time   |
        | 0     | 3   | missing_time         |
        | 0     | 4   | missing_time         |
        | 0     | 6   | clock_went_backwards |
        | 0     | 7   | watermark_regressed  |
      And the verdicts are:
        | seq | event_time | watermark | verdict |
        | 8   | 950        | 1000      | dropped |

    @TR-15 @OXL-R16 @TR-7
    Scenario: Every row of a repeated seq is a duplicate_seq error row and changes nothing
      The table's rows at seq 1 were a watermark and an event of source 1: both are error
      rows, so the source's watermark stays 1000 and the next event is judged by it.
      Given late data with the default configuration
      When these items arrive in one batch:
        | kind          | source | event_time | time |
        | watermark     | 1      |            | 1000 |
        | duplicate_seq |        |            |      |
        | duplicate_seq |        |            |      |
        | event         | 1      | 1500       |      |
      Then the errors are:
        | batch | seq | reason        |
        | 0     | 1   | duplicate_seq |
        | 0     | 2   | duplicate_seq |
      And the verdicts are:
        | seq | event_time | watermark | verdict |
        | 3   | 1500       | 1000      | on_time |

    @OXL-R16 @TR-14 @TR-7
    Scenario: The end of the input is not an item of this area, and the stream goes on
      Windows close by the sources' own watermarks, so a producer states its final
      watermark with a watermark item: an end item is unsupported_item, changes
      nothing, and the items after it are judged as usual.
      Given late data with the default configuration
      When these items arrive in one batch:
        | kind      | source | event_time | time |
        | watermark | 1      |            | 1000 |
        | end       |        |            |      |
        | event     | 1      | 950        |      |
      Then the errors are:
        | batch | seq | reason           |
        | 0     | 1   | unsupported_item |
      And the verdicts are:
        | seq | event_time | watermark | verdict |
        | 2   | 950        | 1000      | dropped |

    @OXL-R17 @TR-5
    Scenario: Every batch has its progress row, empty batches included
      Given late data with the default configuration
      When 2 empty batches pass
      And these events arrive in the next batch:
        | event_time |
        | 5          |
      Then the progress is:
        | batch | on_time | allowed_late | reassigned | dropped | side_output | open_windows |
        | 0     | 0       | 0            | 0          | 0       | 0           | 0            |
        | 1     | 0       | 0            | 0          | 0       | 0           | 0            |
        | 2     | 1       | 0            | 0          | 0       | 0           | 0            |
      And the events table is:
        | batch | seq | source | event_time | watermark | verdict | lateness | assigned_time |
        | 2     | 0   | -      | 5          | -         | on_time | -        | 5             |

    @OXL-R18 @TR-5
    Scenario Outline: Watermarks, windows, counters, the clock and positions cross a restart
      Given late data configured with:
        | setting          | value      |
        | policy           | SideOutput |
        | channel          | late       |
        | window_size      | 1000       |
        | allowed_lateness | 100        |
      When these items arrive in one batch:
        | kind      | source | event_time | time |
        | clock     |        |            | 700  |
        | event     | 1      | 500        |      |
        | watermark | 1      |            | 1050 |
        | event     | 1      | 10         |      |
        | watermark | 1      |            | 2000 |
        | event     | 1      | 1999       |      |
        | event     | 1      | 20         |      |
      And the engine <restarts or keeps running>
      And these items arrive in the next batch:
        | kind      | source | event_time | time |
        | clock     |        |            | 600  |
        | watermark | 1      |            | 1999 |
        | event     | 1      | 500        |      |
        | watermark | 1      |            | 3100 |
      Then the errors are:
        | batch | seq | reason               |
        | 1     | 0   | clock_went_backwards |
        | 1     | 1   | watermark_regressed  |
      And the verdicts in the last batch are:
        | seq | event_time | watermark | verdict     |
        | 2   | 500        | 2000      | side output |
      And the side outputs are:
        | batch | channel | position | seq | event_time |
        | 0     | late    | 0        | 6   | 20         |
        | 1     | late    | 1        | 2   | 500        |
      And the windows are:
        | batch | seq | source | window_start | window_end | watermark | count |
        | 0     | 4   | 1      | 0            | 1000       | 2000      | 2     |
        | 1     | 3   | 1      | 1000         | 2000       | 3100      | 1     |
      And the progress is:
        | batch | on_time | allowed_late | side_output | open_windows |
        | 0     | 1       | 2            | 1           | 1            |
        | 1     | 1       | 2            | 2           | 0            |

      Examples:
        | restarts or keeps running      |
        | restarts from its checkpoint   |
        | keeps running                  |

    @OXL-R19 @OXL-R14 @OXL-R17 @OXL-R18 @TR-5
    Scenario: The same items cut after the first watermark give the same rows, numbered in their new batches
      The items of the restart scenario above, cut after the watermark 1050 instead of after
      the event at 20, with the restart moved there too. Batch 0 keeps the event at 500 (no
      watermark yet: on time, window [0, 1000) open, since it closes at 1000 + 100) and the
      watermark 1050. In batch 1 the event at 10 is still allowed late under 1050, 2000 still
      closes [0, 1000) with 2 events, 1999 is allowed late in [1000, 2000), 20 and 500 still go
      to the side channel as positions 0 and 1, now both drained at the end of batch 1, the clock
      600 still goes back from 700 and the watermark 1999 still regresses from 2000, and 3100
      closes [1000, 2000). Each row's place in the whole trace is the one it had: the closing
      item of [0, 1000) is still item 4, the side output 20 still item 6. The new progress row of
      batch 0 counts what its three items did; batch 1 ends after all eleven items and its row
      equals the last row of the restart scenario.
      Given late data configured with:
        | setting          | value      |
        | policy           | SideOutput |
        | channel          | late       |
        | window_size      | 1000       |
        | allowed_lateness | 100        |
      When these items arrive in one batch:
        | kind      | source | event_time | time |
        | clock     |        |            | 700  |
        | event     | 1      | 500        |      |
        | watermark | 1      |            | 1050 |
      And the engine restarts from its checkpoint
      And these items arrive in the next batch:
        | kind      | source | event_time | time |
        | event     | 1      | 10         |      |
        | watermark | 1      |            | 2000 |
        | event     | 1      | 1999       |      |
        | event     | 1      | 20         |      |
        | clock     |        |            | 600  |
        | watermark | 1      |            | 1999 |
        | event     | 1      | 500        |      |
        | watermark | 1      |            | 3100 |
      Then the errors are:
        | batch | seq | reason               |
        | 1     | 4   | clock_went_backwards |
        | 1     | 5   | watermark_regressed  |
      And the judged events are:
        | batch | seq | event_time | watermark | verdict      | lateness | assigned_time | channel |
        | 0     | 1   | 500        | -         | on time      | -        | 500           | -       |
        | 1     | 0   | 10         | 1050      | allowed late | 1040     | 10            | -       |
        | 1     | 2   | 1999       | 2000      | allowed late | 1        | 1999          | -       |
        | 1     | 3   | 20         | 2000      | side output  | 1980     | -             | late    |
        | 1     | 6   | 500        | 2000      | side output  | 1500     | -             | late    |
      And the side outputs are:
        | batch | channel | position | seq | event_time |
        | 1     | late    | 0        | 3   | 20         |
        | 1     | late    | 1        | 6   | 500        |
      And the windows are:
        | batch | seq | source | window_start | window_end | watermark | count |
        | 1     | 1   | 1      | 0            | 1000       | 2000      | 2     |
        | 1     | 7   | 1      | 1000         | 2000       | 3100      | 1     |
      And the progress is:
        | batch | on_time | allowed_late | reassigned | dropped | side_output | open_windows |
        | 0     | 1       | 0            | 0          | 0       | 0           | 1            |
        | 1     | 1       | 2            | 0          | 0       | 2           | 0            |

  Rule: The object API (oracle-only)

    @oracle-only @OXL-R13 @TR-10
    Scenario: The router keeps one queue per channel and drains them independently
      A stream has one side-output channel (its policy's); several channels and draining
      one of them are calls of the router's API with no stream of their own (TR-10).
      Given a SideOutputRouter
      When the router routes these events:
        | channel | event_time |
        | a       | 30         |
        | b       | 10         |
        | a       | 20         |
      Then draining channel a gives 30, 20
      And channel b holds 1 event
      And draining channel a gives nothing
      And draining channel c gives nothing
      And the router's channels are a, b, c
      And draining channel b gives 10

    @oracle-only @OXL-R10 @TR-10
    Scenario: close_expired forgets the windows closed at a time, in order of their end
      Given an AllowedLatenessTracker with an allowed lateness of 100 ms
      When the tracker registers windows ending at 3000, 1000, 2000
      Then closing at 2099 returns the windows ending at 1000
      And closing at 2100 returns the windows ending at 2000
      And closing at 2100 returns no window
      And a window ending at 3000 is open at 3099 and closed at 3100
