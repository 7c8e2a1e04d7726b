@OXJ
Feature: Window joins
  A window join pairs the events of two inputs, left and right, that share a key and fall
  in related windows: tumbling panes on both sides, tumbling panes on the left and sliding
  windows on the right, or sessions on both sides. The join has one watermark, given to it
  by `watermark` items; it purges panes, closes sessions and judges late events by it.
  Clauses: spec/window_joins.md.

  An event names its input in the `side` column. Batches are numbered from 0 as in the
  output tables: each When step that adds items is one new batch unless it says "in the
  same batch" (see harness/steps.py). A pair row names the item that emitted it (batch,
  seq), then its left and its right event by their own batch and seq. "-" in an expected
  table is null: the watermark column of progress is null until the first watermark.

  Rule: Tumbling x tumbling: one pane index, emitted when the second event arrives

    @OXJ-R1 @OXJ-R3 @OXJ-R4 @OXJ-R5 @OXJ-R6 @OXJ-R17 @OXJ-R20
    Scenario: Events of one key and one pane pair up as soon as the second of them arrives
      The right event at 12 is in pane [10, 20), the left one at 3 in [0, 10): no pair. Keys
      are compared exactly, so A is not a. Every (key, pane) an event reached is held.
      Given window joins with a tumbling-tumbling join of 10 ms panes
      When these events arrive in one batch:
        | side  | key | event_time | value |
        | left  | a   | 3          | 1     |
        | right | a   | 7          | 2     |
        | right | a   | 12         | 3     |
        | left  | b   | 5          | 4     |
        | right | A   | 4          | 5     |
        | right | a   | 9          | 6     |
      Then the pairs are:
        | batch | seq | key | left_batch | left_seq | left_time | left_value | right_batch | right_seq | right_time | right_value |
        | 0     | 1   | a   | 0          | 0        | 3         | 1          | 0           | 1         | 7          | 2           |
        | 0     | 5   | a   | 0          | 0        | 3         | 1          | 0           | 5         | 9          | 6           |
      And the progress is:
        | batch | watermark | left_events | right_events | pairs_emitted | late_events_dropped | open_windows |
        | 0     | -         | 2           | 4            | 2             | 0                   | 4            |
      And the late table is empty
      And there are no errors

    @OXJ-R3 @OXJ-R4 @OXJ-R5 @OXJ-R6 @OXJ-R17
    Scenario: Every left event of a pane pairs with every right event of it, across batches, and panes are half-open
      A pane holds its start and not its end: 10 opens pane [10, 20). The right event at 5
      arrives second for both left events of [0, 10), so both pairs carry its position.
      Given window joins with a tumbling-tumbling join of 10 ms panes
      When these events arrive in one batch:
        | side  | key | event_time |
        | left  | a   | 0          |
        | left  | a   | 9          |
        | right | a   | 10         |
      And these events arrive in the next batch:
        | side  | key | event_time |
        | right | a   | 5          |
        | left  | a   | 10         |
        | left  | a   | 19         |
        | left  | a   | 20         |
      Then the pairs are:
        | batch | seq | left_batch | left_seq | left_time | right_batch | right_seq | right_time |
        | 1     | 0   | 0          | 0        | 0         | 1           | 0         | 5          |
        | 1     | 0   | 0          | 1        | 9         | 1           | 0         | 5          |
        | 1     | 1   | 1          | 1        | 10        | 0           | 2         | 10         |
        | 1     | 2   | 1          | 2        | 19        | 0           | 2         | 10         |
      And the progress is:
        | batch | watermark | left_events | right_events | pairs_emitted | late_events_dropped | open_windows |
        | 0     | -         | 2           | 1            | 0             | 0                   | 2            |
        | 1     | -         | 5           | 2            | 4             | 0                   | 3            |

    @OXJ-R4 @OXJ-R5 @TR-2
    Scenario: Negative times fall in panes by floor division
      -1 and -10 are both in pane [-10, 0); 0 is in [0, 10) and -11 in [-20, -10).
      Given window joins with a tumbling-tumbling join of 10 ms panes
      When these events arrive in one batch:
        | side  | key | event_time |
        | left  | k   | -1         |
        | right | k   | -10        |
        | right | k   | 0          |
        | left  | k   | -11        |
        | right | k   | -20        |
        | left  | k   | -10        |
      Then the pairs are:
        | batch | seq | key | left_seq | left_time | right_seq | right_time |
        | 0     | 1   | k   | 0        | -1        | 1         | -10        |
        | 0     | 4   | k   | 3        | -11       | 4         | -20        |
        | 0     | 5   | k   | 5        | -10       | 1         | -10        |
      And the progress is:
        | batch | left_events | right_events | pairs_emitted | open_windows |
        | 0     | 3           | 3            | 3             | 3            |

    @OXJ-R2 @OXJ-R4 @OXJ-R6 @OXJ-R7 @OXJ-R17
    Scenario: A pane is purged when the watermark reaches its end, and an event of a purged pane is late
      A watermark of 9 leaves [0, 10) open; 10 purges it and emits nothing. The right event at
      9 then comes too late, while 10 starts a pane of its own.
      Given window joins with a tumbling-tumbling join of 10 ms panes
      When these items arrive in one batch:
        | kind      | side  | key | event_time | time |
        | event     | left  | a   | 5          |      |
        | watermark |       |     |            | 9    |
        | event     | right | a   | 8          |      |
      And the join watermark reaches 10 ms
      And these events arrive in the next batch:
        | side  | key | event_time |
        | right | a   | 9          |
        | left  | a   | 10         |
        | right | a   | 19         |
      Then the pairs are:
        | batch | seq | left_time | right_time |
        | 0     | 2   | 5         | 8          |
        | 2     | 2   | 10        | 19         |
      And the late events are:
        | batch | seq | side  | key | event_time | watermark |
        | 2     | 0   | right | a   | 9          | 10        |
      And the progress is:
        | batch | watermark | left_events | right_events | pairs_emitted | late_events_dropped | open_windows |
        | 0     | 9         | 1           | 1            | 1             | 0                   | 1            |
        | 1     | 10        | 1           | 1            | 1             | 0                   | 0            |
        | 2     | 10        | 2           | 2            | 2             | 1                   | 1            |

    @OXJ-R7 @OXJ-R4 @OXJ-R17
    Scenario Outline: The allowed lateness keeps a pane open until the watermark reaches its end plus the lateness
      Pane [0, 10) holds the left event at 5; the right event at 9 arrives after the watermark.
      Given window joins with a tumbling-tumbling join of 10 ms panes and an allowed lateness of <lateness> ms
      When these events arrive in one batch:
        | side | key | event_time |
        | left | a   | 5          |
      And these items arrive in the next batch:
        | kind      | side  | key | event_time | time        |
        | watermark |       |     |            | <watermark> |
        | event     | right | a   | 9          |             |
      Then the progress is:
        | batch | watermark   | left_events | right_events | pairs_emitted | late_events_dropped | open_windows |
        | 0     | -           | 1           | 0            | 0             | 0                   | 1            |
        | 1     | <watermark> | 1           | <right>      | <pairs>       | <late>              | <open>       |

      Examples:
        | lateness | watermark | right | pairs | late | open |
        | 0        | 9         | 1     | 1     | 0    | 1    |
        | 0        | 10        | 0     | 0     | 1    | 0    |
        | 5        | 14        | 1     | 1     | 0    | 1    |
        | 5        | 15        | 0     | 0     | 1    | 0    |
        | 100      | 109       | 1     | 1     | 0    | 1    |
        | 100      | 110       | 0     | 0     | 1    | 0    |

    @OXJ-R21 @OXJ-R2 @OXJ-R7 @OXJ-R17 @TR-5
    Scenario Outline: Panes, their events, the watermark and the counters cross a restart
      The left event at 15 waits in pane [10, 20) across the restart; the watermark 10 still
      makes 8 late and 5 a regression after it.
      Given window joins with a tumbling-tumbling join of 10 ms panes
      When these items arrive in one batch:
        | kind      | side  | key | event_time | value | time |
        | event     | left  | a   | 15         | 1     |      |
        | event     | right | a   | 3          |       |      |
        | watermark |       |     |            |       | 10   |
      And the engine <restarts or keeps running>
      And these items arrive in the next batch:
        | kind      | side  | key | event_time | value | time |
        | event     | right | a   | 17         | 2     |      |
        | event     | left  | a   | 8          |       |      |
        | watermark |       |     |            |       | 5    |
        | event     | left  | a   | 19         |       |      |
      Then the pairs are:
        | batch | seq | key | left_batch | left_seq | left_time | left_value | right_batch | right_seq | right_time | right_value |
        | 1     | 0   | a   | 0          | 0        | 15        | 1          | 1           | 0         | 17         | 2           |
        | 1     | 3   | a   | 1          | 3        | 19        | 0          | 1           | 0         | 17         | 2           |
      And the late events are:
        | batch | seq | side | key | event_time | watermark |
        | 1     | 1   | left | a   | 8          | 10        |
      And the errors are:
        | batch | seq | reason              |
        | 1     | 2   | watermark_regressed |
      And the progress is:
        | batch | watermark | left_events | right_events | pairs_emitted | late_events_dropped | open_windows |
        | 0     | 10        | 1           | 1            | 0             | 0                   | 1            |
        | 1     | 10        | 2           | 2            | 2             | 1                   | 1            |

      Examples:
        | restarts or keeps running    |
        | restarts from its checkpoint |
        | keeps running                |

    @OXJ-R23 @OXJ-R3 @OXJ-R7 @OXJ-R17 @TR-5
    Scenario: The same items in one batch give the same pairs, late rows and errors, numbered in it
      The items of the restart scenario above, no longer cut after the watermark 10: the pair
      (15, 17) is still emitted by the right event at 17 and (19, 17) by the left event at 19,
      8 is still late and 5 still a regression; only their batch and seq change, and the one
      progress row equals the two-batch run's last.
      Given window joins with a tumbling-tumbling join of 10 ms panes
      When these items arrive in one batch:
        | kind      | side  | key | event_time | value | time |
        | event     | left  | a   | 15         | 1     |      |
        | event     | right | a   | 3          |       |      |
        | watermark |       |     |            |       | 10   |
        | event     | right | a   | 17         | 2     |      |
        | event     | left  | a   | 8          |       |      |
        | watermark |       |     |            |       | 5    |
        | event     | left  | a   | 19         |       |      |
      Then the pairs are:
        | batch | seq | key | left_batch | left_seq | left_time | left_value | right_batch | right_seq | right_time | right_value |
        | 0     | 3   | a   | 0          | 0        | 15        | 1          | 0           | 3         | 17         | 2           |
        | 0     | 6   | a   | 0          | 6        | 19        | 0          | 0           | 3         | 17         | 2           |
      And the late events are:
        | batch | seq | side | key | event_time | watermark |
        | 0     | 4   | left | a   | 8          | 10        |
      And the errors are:
        | batch | seq | reason              |
        | 0     | 5   | watermark_regressed |
      And the progress is:
        | batch | watermark | left_events | right_events | pairs_emitted | late_events_dropped | open_windows |
        | 0     | 10        | 2           | 2            | 2             | 1                   | 1            |

  Rule: Tumbling x sliding: a right event reaches every left pane its sliding windows overlap

    @OXJ-R8 @OXJ-R9 @OXJ-R10 @OXJ-R11 @OXJ-R17
    Scenario: A right event joins the left panes its sliding windows overlap, not only the pane holding its time
      The right event at 15 lies in the sliding windows [0, 20) and [10, 30), whose union meets
      the left panes [0, 10), [10, 20) and [20, 30); the one at 9 lies in [-10, 10) and
      [0, 20). Both windows of 15 overlap [10, 20), and still the pair (15, 15) appears once.
      The upstream rule, a left pane holding the right time, would give (15, 15) and (5, 9) only.
      Given window joins with a tumbling-sliding join of 10 ms left panes and right windows of 20 ms sliding every 10 ms
      When these events arrive in one batch:
        | side  | key | event_time |
        | left  | a   | -5         |
        | left  | a   | 5          |
        | left  | a   | 15         |
        | left  | a   | 25         |
        | left  | a   | 35         |
        | right | a   | 15         |
        | right | a   | 9          |
      Then the pairs are:
        | batch | seq | key | left_seq | left_time | right_seq | right_time |
        | 0     | 5   | a   | 1        | 5         | 5         | 15         |
        | 0     | 5   | a   | 2        | 15        | 5         | 15         |
        | 0     | 5   | a   | 3        | 25        | 5         | 15         |
        | 0     | 6   | a   | 0        | -5        | 6         | 9          |
        | 0     | 6   | a   | 1        | 5         | 6         | 9          |
        | 0     | 6   | a   | 2        | 15        | 6         | 9          |
      And the progress is:
        | batch | watermark | left_events | right_events | pairs_emitted | late_events_dropped | open_windows |
        | 0     | -         | 5           | 2            | 6             | 0                   | 5            |

    @OXJ-R8 @OXJ-R9 @OXJ-R11
    Scenario: The union of a right event's sliding windows is half-open
      Windows of 10 sliding every 5: 14 lies in [5, 15) and [10, 20), so it reaches [0, 10)
      and [10, 20) but not [20, 30); 15 lies in [10, 20) and [15, 25), so it reaches [20, 30)
      and no longer [0, 10). 4 and 5 both reach [0, 10). Every left pane a right event reaches
      is held, left events or not.
      Given window joins with a tumbling-sliding join of 10 ms left panes and right windows of 10 ms sliding every 5 ms
      When these events arrive in one batch:
        | side  | key | event_time |
        | left  | a   | 0          |
        | left  | a   | 20         |
        | right | a   | 14         |
        | right | a   | 15         |
        | right | a   | 4          |
        | right | a   | 5          |
      Then the pairs are:
        | batch | seq | left_seq | left_time | right_seq | right_time |
        | 0     | 2   | 0        | 0         | 2         | 14         |
        | 0     | 3   | 1        | 20        | 3         | 15         |
        | 0     | 4   | 0        | 0         | 4         | 4          |
        | 0     | 5   | 0        | 0         | 5         | 5          |
      And the progress is:
        | batch | left_events | right_events | pairs_emitted | open_windows |
        | 0     | 2           | 4            | 4             | 4            |

    @OXJ-R10 @OXJ-R1 @OXJ-R3
    Scenario: Right events with equal times are distinct events, each paired once
      An event is identified by its position, not by its time or content: three right events
      at 12, two of them identical, make three pairs with each left event at 12.
      Given window joins with a tumbling-sliding join of 10 ms left panes and right windows of 20 ms sliding every 10 ms
      When these events arrive in one batch:
        | side  | key | event_time | value |
        | left  | a   | 12         | 1     |
        | right | a   | 12         | 2     |
        | right | a   | 12         | 3     |
        | right | a   | 12         | 2     |
      And these events arrive in the next batch:
        | side | key | event_time | value |
        | left | a   | 12         | 9     |
      Then the pairs are:
        | batch | seq | left_batch | left_seq | left_value | right_batch | right_seq | right_value |
        | 0     | 1   | 0          | 0        | 1          | 0           | 1         | 2           |
        | 0     | 2   | 0          | 0        | 1          | 0           | 2         | 3           |
        | 0     | 3   | 0          | 0        | 1          | 0           | 3         | 2           |
        | 1     | 0   | 1          | 0        | 9          | 0           | 1         | 2           |
        | 1     | 0   | 1          | 0        | 9          | 0           | 2         | 3           |
        | 1     | 0   | 1          | 0        | 9          | 0           | 3         | 2           |
      And the progress is:
        | batch | left_events | right_events | pairs_emitted | open_windows |
        | 0     | 1           | 3            | 3             | 3            |
        | 1     | 2           | 3            | 6             | 3            |

    @OXJ-R11 @OXJ-R2 @OXJ-R17
    Scenario: A right event is late only when every left pane it reaches is purged
      The watermark 10 purges [0, 10): the right event at 15 still reaches [10, 20) and
      [20, 30), so it pairs with 15 but not with 5, and the left event at 8 is late. The
      watermark 30 purges [10, 20) and [20, 30): 25 still reaches [30, 40), 19 reaches nothing
      open and is late.
      Given window joins with a tumbling-sliding join of 10 ms left panes and right windows of 20 ms sliding every 10 ms
      When these items arrive in one batch:
        | kind      | side  | key | event_time | time |
        | event     | left  | a   | 5          |      |
        | event     | left  | a   | 15         |      |
        | watermark |       |     |            | 10   |
        | event     | right | a   | 15         |      |
        | event     | left  | a   | 8          |      |
      And these items arrive in the next batch:
        | kind      | side  | key | event_time | time |
        | watermark |       |     |            | 30   |
        | event     | right | a   | 25         |      |
        | event     | right | a   | 19         |      |
        | event     | left  | a   | 30         |      |
      Then the pairs are:
        | batch | seq | left_batch | left_seq | left_time | right_batch | right_seq | right_time |
        | 0     | 3   | 0          | 1        | 15        | 0           | 3         | 15         |
        | 1     | 3   | 1          | 3        | 30        | 1           | 1         | 25         |
      And the late events are:
        | batch | seq | side  | key | event_time | watermark |
        | 0     | 4   | left  | a   | 8          | 10        |
        | 1     | 2   | right | a   | 19         | 30        |
      And the progress is:
        | batch | watermark | left_events | right_events | pairs_emitted | late_events_dropped | open_windows |
        | 0     | 10        | 2           | 1            | 1             | 1                   | 2            |
        | 1     | 30        | 3           | 2            | 2             | 2                   | 1            |

    @OXJ-R11 @OXJ-R8 @OXJ-R17
    Scenario Outline: A right event is late once the last pane it reaches is purged, allowed lateness included
      The right event at 19 reaches [0, 10), [10, 20) and [20, 30); the last one is purged at
      30 plus the allowed lateness.
      Given window joins with a tumbling-sliding join of 10 ms left panes and right windows of 20 ms sliding every 10 ms and an allowed lateness of <lateness> ms
      When these items arrive in one batch:
        | kind      | side  | key | event_time | time        |
        | watermark |       |     |            | <watermark> |
        | event     | right | a   | 19         |             |
      Then the progress is:
        | batch | watermark   | right_events | late_events_dropped | open_windows |
        | 0     | <watermark> | <right>      | <late>              | <open>       |

      Examples:
        | lateness | watermark | right | late | open |
        | 0        | 29        | 1     | 0    | 1    |
        | 0        | 30        | 0     | 1    | 0    |
        | 7        | 36        | 1     | 0    | 1    |
        | 7        | 37        | 0     | 1    | 0    |

    @OXJ-R21 @OXJ-R11 @OXJ-R2 @TR-5
    Scenario Outline: A right event's copies in the panes still open outlive the purge of the others, across a restart
      The right event at 15 reaches [0, 10), [10, 20) and [20, 30); the watermark 20 purges the
      first two, and the left event at 25 still finds it in [20, 30). The right event at 21
      reaches [10, 20), purged, and [20, 30) and [30, 40), open.
      Given window joins with a tumbling-sliding join of 10 ms left panes and right windows of 20 ms sliding every 10 ms
      When these items arrive in one batch:
        | kind      | side  | key | event_time | value | time |
        | event     | right | a   | 15         | 1     |      |
        | watermark |       |     |            |       | 20   |
      And the engine <restarts or keeps running>
      And these items arrive in the next batch:
        | kind      | side  | key | event_time | value | time |
        | event     | left  | a   | 25         | 2     |      |
        | event     | left  | a   | 19         |       |      |
        | event     | right | a   | 21         | 3     |      |
        | watermark |       |     |            |       | 10   |
      Then the pairs are:
        | batch | seq | key | left_batch | left_seq | left_time | left_value | right_batch | right_seq | right_time | right_value |
        | 1     | 0   | a   | 1          | 0        | 25        | 2          | 0           | 0         | 15         | 1           |
        | 1     | 2   | a   | 1          | 0        | 25        | 2          | 1           | 2         | 21         | 3           |
      And the late events are:
        | batch | seq | side | key | event_time | watermark |
        | 1     | 1   | left | a   | 19         | 20        |
      And the errors are:
        | batch | seq | reason              |
        | 1     | 3   | watermark_regressed |
      And the progress is:
        | batch | watermark | left_events | right_events | pairs_emitted | late_events_dropped | open_windows |
        | 0     | 20        | 0           | 1            | 0             | 0                   | 1            |
        | 1     | 20        | 1           | 2            | 2             | 1                   | 2            |

      Examples:
        | restarts or keeps running    |
        | restarts from its checkpoint |
        | keeps running                |

    @OXJ-R18 @OXJ-R8 @OXJ-R9
    Scenario: Right windows as long as 256 left panes, sliding by their whole size, are accepted
      Windows of 256 sliding every 256 are tumbling: the right event at 0 reaches the left
      panes [0, 1) to [255, 256), the one at 256 the panes [256, 257) to [511, 512), and
      each of them is held.
      Given window joins with a tumbling-sliding join of 1 ms left panes and right windows of 256 ms sliding every 256 ms
      When these events arrive in one batch:
        | side  | key | event_time |
        | left  | a   | 0          |
        | left  | a   | 255        |
        | left  | a   | 256        |
        | right | a   | 0          |
        | right | a   | 256        |
      Then the pairs are:
        | batch | seq | left_time | right_time |
        | 0     | 3   | 0         | 0          |
        | 0     | 3   | 255       | 0          |
        | 0     | 4   | 256       | 256        |
      And the progress is:
        | batch | left_events | right_events | pairs_emitted | open_windows |
        | 0     | 3           | 2            | 3             | 512          |

  Rule: Session x session: overlapping sessions emit their events' cross product once both are closed

    @OXJ-R12 @OXJ-R13 @OXJ-R14 @OXJ-R15 @OXJ-R16 @OXJ-R3 @OXJ-R17
    Scenario: Overlapping sessions emit every pair of their events at the watermark that closes the later one
      The left session [0, 5] ends at 15 and the right one [12, 14] at 24; their extended
      intervals [0, 15] and [12, 24] meet. The left session closes at 15 and waits, still
      held, for its partner; at 24 both are closed, their 3 x 2 pairs carry the watermark's
      position, and both are forgotten.
      Given window joins with a session-session join with a gap of 10 ms
      When these events arrive in one batch:
        | side  | key | event_time | value |
        | left  | a   | 0          | 1     |
        | left  | a   | 5          | 2     |
        | right | a   | 12         | 3     |
        | right | a   | 14         | 4     |
        | left  | a   | 5          | 5     |
      And the join watermark reaches 15 ms
      And the join watermark reaches 23 ms
      And the join watermark reaches 24 ms
      Then the pairs are:
        | batch | seq | key | left_seq | left_time | left_value | right_seq | right_time | right_value |
        | 3     | 0   | a   | 0        | 0         | 1          | 2         | 12         | 3           |
        | 3     | 0   | a   | 0        | 0         | 1          | 3         | 14         | 4           |
        | 3     | 0   | a   | 1        | 5         | 2          | 2         | 12         | 3           |
        | 3     | 0   | a   | 1        | 5         | 2          | 3         | 14         | 4           |
        | 3     | 0   | a   | 4        | 5         | 5          | 2         | 12         | 3           |
        | 3     | 0   | a   | 4        | 5         | 5          | 3         | 14         | 4           |
      And the progress is:
        | batch | watermark | left_events | right_events | pairs_emitted | late_events_dropped | open_windows |
        | 0     | -         | 3           | 2            | 0             | 0                   | 2            |
        | 1     | 15        | 3           | 2            | 0             | 0                   | 2            |
        | 2     | 23        | 3           | 2            | 0             | 0                   | 2            |
        | 3     | 24        | 3           | 2            | 6             | 0                   | 0            |

    @OXJ-R12 @OXJ-R13 @OXJ-R15 @OXJ-R16 @OXJ-R17
    Scenario: The gap is inclusive, and each pair of sessions is emitted as soon as both are closed
      Left: 0 and 10 are one session (10 is exactly the gap after 0), 21 starts another.
      Right: 18 and 31 are two sessions. Extended, the left ones are [0, 20] and [21, 31], the
      right ones [18, 28] and [31, 41]; the second ones meet at 31 exactly. At 31 every session
      but [31, 41] is closed: the pairs with the right event at 18 are emitted, [0, 20] and
      [18, 28] are forgotten, and [21, 31] waits for [31, 41]. Upstream waits for every
      session of the key and would emit all four pairs at 41.
      Given window joins with a session-session join with a gap of 10 ms
      When these events arrive in one batch:
        | side  | key | event_time |
        | left  | a   | 0          |
        | left  | a   | 10         |
        | left  | a   | 21         |
        | right | a   | 18         |
        | right | a   | 31         |
      And the join watermark reaches 31 ms
      And the join watermark reaches 41 ms
      Then the pairs are:
        | batch | seq | left_seq | left_time | right_seq | right_time |
        | 1     | 0   | 0        | 0         | 3         | 18         |
        | 1     | 0   | 1        | 10        | 3         | 18         |
        | 1     | 0   | 2        | 21        | 3         | 18         |
        | 2     | 0   | 2        | 21        | 4         | 31         |
      And the progress is:
        | batch | watermark | left_events | right_events | pairs_emitted | late_events_dropped | open_windows |
        | 0     | -         | 3           | 2            | 0             | 0                   | 4            |
        | 1     | 31        | 3           | 2            | 3             | 0                   | 2            |
        | 2     | 41        | 3           | 2            | 4             | 0                   | 0            |

    @OXJ-R12 @OXJ-R13 @OXJ-R15
    Scenario: An event within the gap of two sessions merges them, whatever the arrival order
      Key a: 0 and 20 are two sessions until 10 bridges them into [0, 20]; 5 is inside it.
      Key b gets 10, 0, 20 and ends with the same session. The merged session, extended to
      [0, 30], meets the right session [25, 35], so every left event pairs with 25. Upstream
      puts 10 in the first session it finds and never merges: of key a's left events, only
      20 would pair.
      Given window joins with a session-session join with a gap of 10 ms
      When these events arrive in one batch:
        | side  | key | event_time |
        | left  | a   | 0          |
        | left  | a   | 20         |
        | left  | a   | 10         |
        | left  | a   | 5          |
        | left  | b   | 10         |
        | left  | b   | 0          |
        | left  | b   | 20         |
        | right | a   | 25         |
        | right | b   | 25         |
      And the join watermark reaches 35 ms
      Then the pairs are:
        | batch | seq | key | left_time | right_time |
        | 1     | 0   | a   | 0         | 25         |
        | 1     | 0   | a   | 20        | 25         |
        | 1     | 0   | a   | 10        | 25         |
        | 1     | 0   | a   | 5         | 25         |
        | 1     | 0   | b   | 10        | 25         |
        | 1     | 0   | b   | 0         | 25         |
        | 1     | 0   | b   | 20        | 25         |
      And the progress is:
        | batch | watermark | left_events | right_events | pairs_emitted | open_windows |
        | 0     | -         | 7           | 2            | 0             | 4            |
        | 1     | 35        | 7           | 2            | 7             | 0            |

    @OXJ-R14 @OXJ-R2 @OXJ-R15 @OXJ-R17
    Scenario: An event is late when its time plus the allowed lateness has reached the watermark, and a closed session never changes
      With a lateness of 5 at the watermark 100, 95 is late and 96 is not. The left session
      [96] closes at 106 + 5 = 111, the right one [105] at 115 + 5 = 120: not at 119. The
      left event at 101 would touch the closed session, but it is late.
      Given window joins with a session-session join with a gap of 10 ms and an allowed lateness of 5 ms
      When these items arrive in one batch:
        | kind      | side  | key | event_time | time |
        | watermark |       |     |            | 100  |
        | event     | left  | a   | 95         |      |
        | event     | left  | a   | 96         |      |
        | event     | right | a   | 105        |      |
      And these items arrive in the next batch:
        | kind      | side | key | event_time | time |
        | watermark |      |     |            | 111  |
        | event     | left | a   | 101        |      |
      And the join watermark reaches 119 ms
      And the join watermark reaches 120 ms
      Then the pairs are:
        | batch | seq | key | left_batch | left_seq | left_time | right_batch | right_seq | right_time |
        | 3     | 0   | a   | 0          | 2        | 96        | 0           | 3         | 105        |
      And the late events are:
        | batch | seq | side | key | event_time | watermark |
        | 0     | 1   | left | a   | 95         | 100       |
        | 1     | 1   | left | a   | 101        | 111       |
      And the progress is:
        | batch | watermark | left_events | right_events | pairs_emitted | late_events_dropped | open_windows |
        | 0     | 100       | 1           | 1            | 0             | 1                   | 2            |
        | 1     | 111       | 1           | 1            | 0             | 2                   | 2            |
        | 2     | 119       | 1           | 1            | 0             | 2                   | 2            |
        | 3     | 120       | 1           | 1            | 1             | 2                   | 0            |

    @OXJ-R16 @OXJ-R13 @OXJ-R17
    Scenario: A session no session of the other side overlaps is forgotten when it closes
      Key b's left session [0, 5] ends at 15 and its right session [30] starts after that: no
      overlap, so each is forgotten at its own close. Key c is seen on the right only.
      Given window joins with a session-session join with a gap of 10 ms
      When these events arrive in one batch:
        | side  | key | event_time |
        | left  | b   | 0          |
        | left  | b   | 5          |
        | right | b   | 30         |
        | right | c   | 50         |
      And the join watermark reaches 15 ms
      And the join watermark reaches 60 ms
      Then the pairs table is empty
      And the progress is:
        | batch | watermark | left_events | right_events | pairs_emitted | late_events_dropped | open_windows |
        | 0     | -         | 2           | 2            | 0             | 0                   | 3            |
        | 1     | 15        | 2           | 2            | 0             | 0                   | 2            |
        | 2     | 60        | 2           | 2            | 0             | 0                   | 0            |

    @OXJ-R15 @OXJ-R16 @OXJ-R13 @OXJ-R17
    Scenario: A closed session waits, still held, for each of its partners to close
      The right session [10] meets the left sessions [0] at 10 and [20] at 20. At 20 it and
      [0] are closed: their pair is emitted and [0] is forgotten, while [10] stays for [20],
      which closes at 30.
      Given window joins with a session-session join with a gap of 10 ms
      When these events arrive in one batch:
        | side  | key | event_time |
        | left  | a   | 0          |
        | right | a   | 10         |
        | left  | a   | 20         |
      And the join watermark reaches 20 ms
      And the join watermark reaches 30 ms
      Then the pairs are:
        | batch | seq | left_seq | left_time | right_seq | right_time |
        | 1     | 0   | 0        | 0         | 1         | 10         |
        | 2     | 0   | 2        | 20        | 1         | 10         |
      And the progress is:
        | batch | watermark | left_events | right_events | pairs_emitted | late_events_dropped | open_windows |
        | 0     | -         | 2           | 1            | 0             | 0                   | 3            |
        | 1     | 20        | 2           | 1            | 1             | 0                   | 2            |
        | 2     | 30        | 2           | 1            | 2             | 0                   | 0            |

    @OXJ-R15 @OXJ-R16 @OXJ-R17
    Scenario: A key that keeps receiving events still emits the pairs of its closed sessions
      Upstream waits until every session of a key is closed on both sides, so this key would
      never emit; here each pair of closed sessions is emitted at the watermark that closes it.
      Given window joins with a session-session join with a gap of 10 ms
      When these events arrive in one batch:
        | side  | key | event_time |
        | left  | a   | 0          |
        | right | a   | 5          |
      And these items arrive in the next batch:
        | kind      | side  | key | event_time | time |
        | event     | left  | a   | 100        |      |
        | event     | right | a   | 104        |      |
        | watermark |       |     |            | 15   |
      And these items arrive in the next batch:
        | kind      | side | key | event_time | time |
        | event     | left | a   | 200        |      |
        | watermark |      |     |            | 114  |
      Then the pairs are:
        | batch | seq | left_batch | left_seq | left_time | right_batch | right_seq | right_time |
        | 1     | 2   | 0          | 0        | 0         | 0           | 1         | 5          |
        | 2     | 1   | 1          | 0        | 100       | 1           | 1         | 104        |
      And the progress is:
        | batch | watermark | left_events | right_events | pairs_emitted | late_events_dropped | open_windows |
        | 0     | -         | 1           | 1            | 0             | 0                   | 2            |
        | 1     | 15        | 2           | 2            | 1             | 0                   | 2            |
        | 2     | 114       | 3           | 2            | 2             | 0                   | 1            |

    @OXJ-R12 @OXJ-R13 @OXJ-R15
    Scenario: Sessions overlap as they are when they close, not as they were when an event arrived
      [0] extended to [0, 10] does not meet the right session [15, 25]; the left event at 8
      grows it to [0, 18], which does.
      Given window joins with a session-session join with a gap of 10 ms
      When these events arrive in one batch:
        | side  | key | event_time |
        | left  | a   | 0          |
        | right | a   | 15         |
      And these events arrive in the next batch:
        | side | key | event_time |
        | left | a   | 8          |
      And the join watermark reaches 25 ms
      Then the pairs are:
        | batch | seq | left_batch | left_seq | left_time | right_batch | right_seq | right_time |
        | 2     | 0   | 0          | 0        | 0         | 0           | 1         | 15         |
        | 2     | 0   | 1          | 0        | 8         | 0           | 1         | 15         |
      And the progress is:
        | batch | watermark | left_events | right_events | pairs_emitted | open_windows |
        | 0     | -         | 1           | 1            | 0             | 2            |
        | 1     | -         | 2           | 1            | 0             | 2            |
        | 2     | 25        | 2           | 1            | 2             | 0            |

    @OXJ-R21 @OXJ-R12 @OXJ-R14 @OXJ-R15 @OXJ-R16 @TR-5
    Scenario Outline: Sessions, their events and the watermark cross a restart, and a session still merges after it
      At 15 the sessions [0] and [5] close and emit; [30] and [50] stay. After the restart 40
      bridges them into [30, 50], 12 is late, and the right session [35] closes at 45 while
      [30, 50] closes at 60.
      Given window joins with a session-session join with a gap of 10 ms
      When these items arrive in one batch:
        | kind      | side  | key | event_time | time |
        | event     | left  | a   | 0          |      |
        | event     | right | a   | 5          |      |
        | event     | left  | a   | 30         |      |
        | event     | left  | a   | 50         |      |
        | watermark |       |     |            | 15   |
      And the engine <restarts or keeps running>
      And these items arrive in the next batch:
        | kind      | side  | key | event_time | time |
        | event     | left  | a   | 40         |      |
        | event     | right | a   | 35         |      |
        | event     | left  | a   | 12         |      |
        | watermark |       |     |            | 45   |
      And the join watermark reaches 60 ms
      Then the pairs are:
        | batch | seq | left_batch | left_seq | left_time | right_batch | right_seq | right_time |
        | 0     | 4   | 0          | 0        | 0         | 0           | 1         | 5          |
        | 2     | 0   | 0          | 2        | 30        | 1           | 1         | 35         |
        | 2     | 0   | 1          | 0        | 40        | 1           | 1         | 35         |
        | 2     | 0   | 0          | 3        | 50        | 1           | 1         | 35         |
      And the late events are:
        | batch | seq | side | key | event_time | watermark |
        | 1     | 2   | left | a   | 12         | 15        |
      And the progress is:
        | batch | watermark | left_events | right_events | pairs_emitted | late_events_dropped | open_windows |
        | 0     | 15        | 3           | 1            | 1             | 0                   | 2            |
        | 1     | 45        | 4           | 2            | 1             | 1                   | 2            |
        | 2     | 60        | 4           | 2            | 4             | 1                   | 0            |

      Examples:
        | restarts or keeps running    |
        | restarts from its checkpoint |
        | keeps running                |

  Rule: The watermark, items and error rows

    @OXJ-R2 @OXJ-R19 @OXJ-R7 @TR-7
    Scenario: A watermark below the current one is an error row and changes nothing; an equal one is no change
      A watermark item's other fields are ignored. After the regression the watermark is
      still 20, so the left event at 17 is late: its pane [10, 20) is purged.
      Given window joins with a tumbling-tumbling join of 10 ms panes
      When these items arrive in one batch:
        | kind      | side | key | event_time | time |
        | watermark | left | a   |            | 20   |
        | watermark |      |     |            | 20   |
        | watermark |      |     |            | 15   |
        | event     | left | a   | 17         |      |
        | event     | left | a   | 20         |      |
      And the join watermark goes back to 19 ms
      Then the errors are:
        | batch | seq | reason              |
        | 0     | 2   | watermark_regressed |
        | 1     | 0   | watermark_regressed |
      And the late events are:
        | batch | seq | side | key | event_time | watermark |
        | 0     | 3   | left | a   | 17         | 20        |
      And the progress is:
        | batch | watermark | left_events | right_events | pairs_emitted | late_events_dropped | open_windows |
        | 0     | 20        | 1           | 0            | 0             | 1                   | 1            |
        | 1     | 20        | 1           | 0            | 0             | 1                   | 1            |

    @OXJ-R2 @OXJ-R7 @OXJ-R11 @OXJ-R14
    Scenario Outline: Before the first watermark nothing is late, and after it lateness is judged at arrival
      Given window joins with <join>
      When these events arrive in one batch:
        | side  | key | event_time |
        | left  | a   | -1000      |
        | right | a   | -995       |
      And these items arrive in the next batch:
        | kind      | side  | key | event_time | time |
        | watermark |       |     |            | 0    |
        | event     | right | a   | -1000      |      |
      Then the pairs are:
        | batch        | seq        | left_time | right_time |
        | <pair batch> | <pair seq> | -1000     | -995       |
      And the late events are:
        | batch | seq | side  | key | event_time | watermark |
        | 1     | 1   | right | a   | -1000      | 0         |
      And the progress is:
        | batch | watermark | left_events | right_events | pairs_emitted | late_events_dropped | open_windows |
        | 0     | -         | 1           | 1            | <pairs>       | 0                   | <open>       |
        | 1     | 0         | 1           | 1            | 1             | 1                   | 0            |

      Examples:
        | join                                                                                       | pair batch | pair seq | pairs | open |
        | a tumbling-tumbling join of 10 ms panes                                                    | 0          | 1        | 1     | 1    |
        | a tumbling-sliding join of 10 ms left panes and right windows of 10 ms sliding every 10 ms | 0          | 1        | 1     | 1    |
        | a session-session join with a gap of 10 ms                                                 | 1          | 0        | 0     | 2    |

    @OXJ-R19 @OXJ-R1 @OXJ-R20 @TR-7 @TR-14 @TR-15
    Scenario: Malformed and unsupported items are error rows in the order of the reasons, and change nothing
      A side is exactly left or right. Clock, end, idle and remove_key items are no items of
      this area: the watermark comes in watermark items, and the stream goes on after an end.
      A missing value is 0.
      Given window joins with a tumbling-tumbling join of 10 ms panes
      When these items arrive in one batch:
        | kind          | side  | key | event_time | value | time |
        | event         | left  | a   | 5          | 7     |      |
        | event         |       | a   | 5          |       |      |
        | event         | up    | a   | 5          |       |      |
        | event         | LEFT  | a   | 5          |       |      |
        | event         | right |     | 5          |       |      |
        | event         | right | a   |            |       |      |
        | event         |       |     |            |       |      |
        | event         | up    |     |            |       |      |
        | event         | right |     |            |       |      |
        | watermark     |       |     | 100        |       |      |
        | clock         |       |     |            |       | 100  |
        | end           |       |     |            |       |      |
        | idle          |       | a   |            |       |      |
        | remove_key    |       | a   |            |       |      |
        | duplicate_seq |       |     |            |       |      |
        | duplicate_seq |       |     |            |       |      |
        | event         | right | a   | 6          |       |      |
      Then the errors are:
        | batch | seq | reason             |
        | 0     | 1   | missing_side       |
        | 0     | 2   | unknown_side       |
        | 0     | 3   | unknown_side       |
        | 0     | 4   | missing_key        |
        | 0     | 5   | missing_event_time |
        | 0     | 6   | missing_side       |
        | 0     | 7   | unknown_side       |
        | 0     | 8   | missing_key        |
        | 0     | 9   | missing_time       |
        | 0     | 10  | unsupported_item   |
        | 0     | 11  | unsupported_item   |
        | 0     | 12  | unsupported_item   |
        | 0     | 13  | unsupported_item   |
        | 0     | 14  | duplicate_seq      |
        | 0     | 15  | duplicate_seq      |
      And the pairs are:
        | batch | seq | key | left_batch | left_seq | left_time | left_value | right_batch | right_seq | right_time | right_value |
        | 0     | 16  | a   | 0          | 0        | 5         | 7          | 0           | 16        | 6          | 0           |
      And the late table is empty
      And the progress is:
        | batch | watermark | left_events | right_events | pairs_emitted | late_events_dropped | open_windows |
        | 0     | -         | 1           | 1            | 1             | 0                   | 1            |

    @OXJ-R19 @OXJ-R2 @OXJ-R7 @OXJ-R11 @OXJ-R16 @TR-14
    Scenario Outline: An end item is no item of this area: a final watermark of I64_MAX closes what is held
      Without a watermark nothing is purged or closed, and an end item changes nothing: a
      producer that means the end sends the final watermark itself. At I64_MAX every pane is
      purged and every session closed.
      Given window joins with <join>
      When these events arrive in one batch:
        | side  | key | event_time |
        | left  | a   | 0          |
        | right | a   | 5          |
        | left  | b   | 0          |
      And the input ends
      And the join watermark reaches I64_MAX ms
      Then the errors are:
        | batch | seq | reason           |
        | 1     | 0   | unsupported_item |
      And the pairs are:
        | batch        | seq        | key | left_time | right_time |
        | <pair batch> | <pair seq> | a   | 0         | 5          |
      And the progress is:
        | batch | watermark | left_events | right_events | pairs_emitted | late_events_dropped | open_windows |
        | 0     | -         | 2           | 1            | <pairs>       | 0                   | <open>       |
        | 1     | -         | 2           | 1            | <pairs>       | 0                   | <open>       |
        | 2     | I64_MAX   | 2           | 1            | 1             | 0                   | 0            |

      Examples:
        | join                                                                                       | pair batch | pair seq | pairs | open |
        | a tumbling-tumbling join of 10 ms panes                                                    | 0          | 1        | 1     | 2    |
        | a tumbling-sliding join of 10 ms left panes and right windows of 10 ms sliding every 10 ms | 0          | 1        | 1     | 2    |
        | a session-session join with a gap of 10 ms                                                 | 2          | 0        | 0     | 3    |

    @OXJ-R17 @TR-5
    Scenario: Every batch has its progress row, empty batches included
      Given window joins with a tumbling-tumbling join of 10 ms panes
      When 2 empty batches pass
      And these events arrive in the next batch:
        | side | key | event_time |
        | left | a   | 5          |
      And the join watermark reaches 10 ms
      And an empty batch passes
      Then the progress is:
        | batch | watermark | left_events | right_events | pairs_emitted | late_events_dropped | open_windows |
        | 0     | -         | 0           | 0            | 0             | 0                   | 0            |
        | 1     | -         | 0           | 0            | 0             | 0                   | 0            |
        | 2     | -         | 1           | 0            | 0             | 0                   | 1            |
        | 3     | 10        | 1           | 0            | 0             | 0                   | 0            |
        | 4     | 10        | 1           | 0            | 0             | 0                   | 0            |
      And the pairs table is empty
      And there are no errors

  Rule: Configuration

    @OXJ-R18 @TR-6
    Scenario Outline: A setting that breaks its rule is refused, and the refusal names it
      Each join takes its own settings and allowed_lateness_ms; a setting it does not use is
      refused like an unknown one. A duration is an integer (not a bool, not a float) in range.
      Given window joins with <join>
      And the setting <setting> is <value>
      Then the configuration is rejected naming <setting>

      Examples:
        | join                                                                                      | setting             | value               |
        | a tumbling-tumbling join of 10 ms panes                                                   | join                | "sliding_sliding"   |
        | a tumbling-tumbling join of 10 ms panes                                                   | join                | "Tumbling_Tumbling" |
        | a tumbling-tumbling join of 10 ms panes                                                   | join                | 1                   |
        | a tumbling-tumbling join of 10 ms panes                                                   | join                | none                |
        | a tumbling-tumbling join of 10 ms panes                                                   | join                | left out            |
        | a tumbling-tumbling join of 10 ms panes                                                   | size_ms             | 0                   |
        | a tumbling-tumbling join of 10 ms panes                                                   | size_ms             | -10                 |
        | a tumbling-tumbling join of 10 ms panes                                                   | size_ms             | true                |
        | a tumbling-tumbling join of 10 ms panes                                                   | size_ms             | 10.0                |
        | a tumbling-tumbling join of 10 ms panes                                                   | size_ms             | "10"                |
        | a tumbling-tumbling join of 10 ms panes                                                   | size_ms             | I64_MAX + 1         |
        | a tumbling-tumbling join of 10 ms panes                                                   | size_ms             | left out            |
        | a tumbling-tumbling join of 10 ms panes                                                   | gap_ms              | 10                  |
        | a tumbling-tumbling join of 10 ms panes                                                   | right_slide_ms      | 10                  |
        | a tumbling-tumbling join of 10 ms panes                                                   | window_size         | 10                  |
        | a tumbling-tumbling join of 10 ms panes                                                   | allowed_lateness_ms | 1.5                 |
        | a tumbling-sliding join of 10 ms left panes and right windows of 20 ms sliding every 5 ms | left_size_ms        | 0                   |
        | a tumbling-sliding join of 10 ms left panes and right windows of 20 ms sliding every 5 ms | right_size_ms       | left out            |
        | a tumbling-sliding join of 10 ms left panes and right windows of 20 ms sliding every 5 ms | right_slide_ms      | 0                   |
        | a tumbling-sliding join of 10 ms left panes and right windows of 20 ms sliding every 5 ms | right_slide_ms      | left out            |
        | a tumbling-sliding join of 10 ms left panes and right windows of 20 ms sliding every 5 ms | size_ms             | 10                  |
        | a session-session join with a gap of 10 ms                                                | gap_ms              | 0                   |
        | a session-session join with a gap of 10 ms                                                | gap_ms              | left out            |
        | a session-session join with a gap of 10 ms                                                | size_ms             | 10                  |
        | a session-session join with a gap of 10 ms                                                | allowed_lateness_ms | -1                  |
        | a session-session join with a gap of 10 ms                                                | allowed_lateness_ms | false               |
        | a session-session join with a gap of 10 ms                                                | allowed_lateness_ms | I64_MAX + 1         |

    @OXJ-R18 @TR-6
    Scenario Outline: Right windows that slide past their size, or span more than 256 left panes, are refused
      A slide above the size leaves times no window covers; a right size above 256 left panes
      would let one right event reach too many panes.
      Given window joins with a tumbling-sliding join of <left> ms left panes and right windows of <size> ms sliding every <slide> ms
      Then the configuration is rejected

      Examples:
        | left | size | slide |
        | 10   | 20   | 21    |
        | 10   | 2561 | 10    |
        | 1    | 257  | 1     |

    @OXJ-R18 @TR-6
    Scenario: A configuration without a join is refused
      Given window joins with the default configuration
      Then the configuration is rejected naming join

  Rule: Times at the bounds of the range (oracle-only)

    @oracle-only @OXJ-R4 @OXJ-R5 @OXJ-R7 @TR-2
    Scenario: The pane holding the top of the time range ends there and is purged by a watermark of I64_MAX
      Traces that exercise saturation run on the oracle alone (TR-2). The top pane starts at
      I64_MAX - 7 and its end, I64_MAX + 3, saturates to I64_MAX; I64_MAX - 8 is in the pane
      below it, which a watermark of I64_MAX - 1 purges. At the bottom, I64_MIN and
      I64_MIN + 5 share a pane.
      Given window joins with a tumbling-tumbling join of 10 ms panes
      When these events arrive in one batch:
        | side  | key | event_time  |
        | left  | a   | I64_MAX     |
        | right | a   | I64_MAX - 1 |
        | left  | b   | I64_MIN     |
        | right | b   | I64_MIN + 5 |
      And these items arrive in the next batch:
        | kind      | side  | key | event_time  | time        |
        | watermark |       |     |             | I64_MAX - 1 |
        | event     | right | a   | I64_MAX - 7 |             |
        | event     | right | a   | I64_MAX - 8 |             |
      And these items arrive in the next batch:
        | kind      | side  | key | event_time | time    |
        | watermark |       |     |            | I64_MAX |
        | event     | right | a   | I64_MAX    |         |
      Then the pairs are:
        | batch | seq | key | left_time | right_time  |
        | 0     | 1   | a   | I64_MAX   | I64_MAX - 1 |
        | 0     | 3   | b   | I64_MIN   | I64_MIN + 5 |
        | 1     | 1   | a   | I64_MAX   | I64_MAX - 7 |
      And the late events are:
        | batch | seq | side  | key | event_time  | watermark   |
        | 1     | 2   | right | a   | I64_MAX - 8 | I64_MAX - 1 |
        | 2     | 1   | right | a   | I64_MAX     | I64_MAX     |
      And the progress is:
        | batch | watermark   | left_events | right_events | pairs_emitted | late_events_dropped | open_windows |
        | 0     | -           | 2           | 2            | 2             | 0                   | 2            |
        | 1     | I64_MAX - 1 | 2           | 3            | 3             | 1                   | 1            |
        | 2     | I64_MAX     | 2           | 3            | 3             | 2                   | 0            |

    @oracle-only @OXJ-R8 @OXJ-R9 @OXJ-R11 @TR-2
    Scenario: Sliding windows at the bounds of the time range are cut there, not moved
      Traces that exercise saturation run on the oracle alone (TR-2). The right event at
      I64_MAX lies in windows from I64_MAX - 17 whose ends saturate to I64_MAX: it reaches the
      left panes from I64_MAX - 17 on, so it pairs with I64_MAX - 10 and I64_MAX, not with
      I64_MAX - 20, whose pane ends at I64_MAX - 17. At the bottom, I64_MIN + 5 lies in a
      window starting 12 below I64_MIN, which overlaps the left pane of I64_MIN (ending at
      I64_MIN + 8); clamping t - 20 to I64_MIN first would lose that window and the pair.
      Given window joins with a tumbling-sliding join of 10 ms left panes and right windows of 20 ms sliding every 10 ms
      When these events arrive in one batch:
        | side  | key | event_time   |
        | left  | a   | I64_MAX - 20 |
        | left  | a   | I64_MAX - 10 |
        | left  | a   | I64_MAX      |
        | right | a   | I64_MAX      |
        | left  | b   | I64_MIN      |
        | right | b   | I64_MIN + 5  |
      Then the pairs are:
        | batch | seq | key | left_time    | right_time  |
        | 0     | 3   | a   | I64_MAX - 10 | I64_MAX     |
        | 0     | 3   | a   | I64_MAX      | I64_MAX     |
        | 0     | 5   | b   | I64_MIN      | I64_MIN + 5 |
      And the progress is:
        | batch | left_events | right_events | pairs_emitted | open_windows |
        | 0     | 4           | 2            | 3             | 5            |

    @oracle-only @OXJ-R4 @OXJ-R7 @TR-2
    Scenario: The pane holding I64_MIN ends where exact arithmetic puts it
      Traces that exercise saturation run on the oracle alone (TR-2). With panes of 10 the
      pane of I64_MIN starts 2 below the range and ends at I64_MIN + 8, not at I64_MIN + 10:
      its start is never clamped before its end is computed.
      Given window joins with a tumbling-tumbling join of 10 ms panes
      When these items arrive in one batch:
        | kind      | side  | key | event_time  | time        |
        | event     | left  | b   | I64_MIN     |             |
        | watermark |       |     |             | I64_MIN + 7 |
        | event     | right | b   | I64_MIN + 7 |             |
        | watermark |       |     |             | I64_MIN + 8 |
        | event     | right | b   | I64_MIN + 1 |             |
      Then the pairs are:
        | batch | seq | key | left_time | right_time  |
        | 0     | 2   | b   | I64_MIN   | I64_MIN + 7 |
      And the late events are:
        | batch | seq | side  | key | event_time  | watermark   |
        | 0     | 4   | right | b   | I64_MIN + 1 | I64_MIN + 8 |
      And the progress is:
        | batch | watermark   | left_events | right_events | pairs_emitted | late_events_dropped | open_windows |
        | 0     | I64_MIN + 8 | 1           | 1            | 1             | 1                   | 0            |

    @oracle-only @OXJ-R12 @OXJ-R13 @OXJ-R14 @OXJ-R15 @TR-2
    Scenario: Session ends saturate at the top of the range and close at a watermark of I64_MAX
      Traces that exercise saturation run on the oracle alone (TR-2). Key a's sessions end at
      I64_MAX (saturated) and close only at I64_MAX; key b's meet at I64_MIN + 10 exactly.
      At I64_MAX - 1 the left event at I64_MAX is not late and joins a's left session.
      Given window joins with a session-session join with a gap of 10 ms
      When these events arrive in one batch:
        | side  | key | event_time   |
        | left  | a   | I64_MAX - 5  |
        | right | a   | I64_MAX      |
        | left  | b   | I64_MIN      |
        | right | b   | I64_MIN + 10 |
      And these items arrive in the next batch:
        | kind      | side | key | event_time | time        |
        | watermark |      |     |            | I64_MAX - 1 |
        | event     | left | a   | I64_MAX    |             |
      And these items arrive in the next batch:
        | kind      | side  | key | event_time | time    |
        | watermark |       |     |            | I64_MAX |
        | event     | right | a   | I64_MAX    |         |
      Then the pairs are:
        | batch | seq | key | left_time   | right_time   |
        | 1     | 0   | b   | I64_MIN     | I64_MIN + 10 |
        | 2     | 0   | a   | I64_MAX - 5 | I64_MAX      |
        | 2     | 0   | a   | I64_MAX     | I64_MAX      |
      And the late events are:
        | batch | seq | side  | key | event_time | watermark |
        | 2     | 1   | right | a   | I64_MAX    | I64_MAX   |
      And the progress is:
        | batch | watermark   | left_events | right_events | pairs_emitted | late_events_dropped | open_windows |
        | 0     | -           | 2           | 2            | 0             | 0                   | 4            |
        | 1     | I64_MAX - 1 | 3           | 2            | 1             | 0                   | 2            |
        | 2     | I64_MAX     | 3           | 2            | 3             | 1                   | 0            |

    @oracle-only @OXJ-R14 @OXJ-R15 @TR-2
    Scenario: With an allowed lateness of I64_MAX, lateness and closing saturate near the bottom of the range
      Traces that exercise saturation run on the oracle alone (TR-2). At the watermark 0,
      I64_MIN + 1 + I64_MAX = 0 is late and I64_MIN + 2 is not. The sessions [I64_MIN + 2]
      end at I64_MIN + 12 and close when the watermark reaches I64_MIN + 12 + I64_MAX = 11.
      Given window joins with a session-session join with a gap of 10 ms and an allowed lateness of I64_MAX ms
      When these items arrive in one batch:
        | kind      | side  | key | event_time  | time |
        | watermark |       |     |             | 0    |
        | event     | left  | a   | I64_MIN + 1 |      |
        | event     | left  | a   | I64_MIN + 2 |      |
        | event     | right | a   | I64_MIN + 2 |      |
      And the join watermark reaches 10 ms
      And the join watermark reaches 11 ms
      Then the pairs are:
        | batch | seq | key | left_time   | right_time  |
        | 2     | 0   | a   | I64_MIN + 2 | I64_MIN + 2 |
      And the late events are:
        | batch | seq | side | key | event_time  | watermark |
        | 0     | 1   | left | a   | I64_MIN + 1 | 0         |
      And the progress is:
        | batch | watermark | left_events | right_events | pairs_emitted | late_events_dropped | open_windows |
        | 0     | 0         | 1           | 1            | 0             | 1                   | 2            |
        | 1     | 10        | 1           | 1            | 0             | 1                   | 2            |
        | 2     | 11        | 1           | 1            | 1             | 1                   | 0            |
