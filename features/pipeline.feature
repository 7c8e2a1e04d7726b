@OXP
Feature: The oxirs pipeline
  The operators of the other oxirs areas composed into the pipeline of the engine overview's
  section 7: admission and the load shedder, a watermark generator per ingress stream
  propagated to every operator, the late-data policy, a tumbling x tumbling join, a session x
  session join and the exactly-once aggregator. Each operator decides by its own clauses;
  these scenarios show what composition adds. Clauses: spec/pipeline.md.

  An event names its ingress stream in the `stream` column and carries its message id
  (`producer`, `partition`, `sequence`); its `value` is the amount the aggregator folds.
  Settings are JSON mappings, one per operator. Times are milliseconds; the processing clock
  starts at 0 and moves only with clock items. Batches are numbered from 0 as in the output
  tables: each When step that adds items is one new batch unless it says "in the same batch"
  (see harness/steps.py). "-" in an expected table is null.

  Rule: Section 7 end to end

    @OXP-R1 @OXP-R2 @OXP-R3 @OXP-R5 @OXP-R6 @OXP-R7 @OXP-R9 @OXP-R10 @OXP-R11
    Scenario: Orders and payments through admission, watermarks, both joins and the aggregator, across a restart
      Orders feed the left side of both joins and payments the right. Each stream's watermark
      is its largest event time less 100 ms, and a join's watermark is the lower of the two.
      The bots stream is not registered and an order 1100 ms behind the clock breaks the lag
      budget: both are rejected and reach nothing. The order at 100 is admitted but late
      against the orders watermark of 800, so the Drop policy takes it out of the main stream:
      no join and no aggregate sees it. After the restart the first order is delivered again:
      the aggregator knows its id and folds nothing, while the tumbling join, which has no
      message ids, pairs it again. The two reported watermarks close the sessions: orders
      [900, 900] and payments [920, 960] overlap, so all four order x payment pairs come out
      at the item that closed the later session.
      Given pipeline configured with:
        | setting       | value                                                                                                            |
        | admission     | {"streams": {"orders": {"class": "Gold", "max_lag": 1000}, "payments": {"class": "Gold", "max_lag": 1000}}} |
        | watermarks    | {"max_out_of_order_ms": 100}                                                                                     |
        | tumbling_join | {"size_ms": 1000, "left": ["orders"], "right": ["payments"]}                                                     |
        | session_join  | {"gap_ms": 50, "left": ["orders"], "right": ["payments"]}                                                        |
        | aggregation   | {"aggregate": "sum"}                                                                                             |
      When these items arrive in one batch:
        | kind  | stream   | key | event_time | value | producer | partition | sequence | time |
        | clock |          |     |            |       |          |           |          | 1000 |
        | event | orders   | a   | 900        | 5     | 1        | 0         | 0        |      |
        | event | payments | a   | 920        | 7     | 2        | 0         | 0        |      |
        | event | bots     | a   | 950        | 1     | 3        | 0         | 0        |      |
        | event | orders   | a   | 100        | 1     | 1        | 0         | 1        |      |
        | event | orders   | a   | -100       | 1     | 1        | 0         | 2        |      |
      And the engine restarts from its checkpoint
      And these items arrive in the next batch:
        | kind      | stream   | key | event_time | value | producer | partition | sequence | time |
        | event     | orders   | a   | 900        | 5     | 1        | 0         | 0        |      |
        | event     | payments | a   | 960        | 2     | 2        | 0         | 1        |      |
        | watermark | orders   |     |            |       |          |           |          | 2000 |
        | watermark | payments |     |            |       |          |           |          | 2000 |
      Then the ingress table is:
        | batch | seq | stream   | key | event_time | decision | reason              | verdict | watermark | assigned_time |
        | 0     | 1   | orders   | a   | 900        | admit    | -                   | on_time | -         | 900           |
        | 0     | 2   | payments | a   | 920        | admit    | -                   | on_time | -         | 920           |
        | 0     | 3   | bots     | a   | 950        | reject   | unregistered_stream | -       | -         | -             |
        | 0     | 4   | orders   | a   | 100        | admit    | -                   | dropped | 800       | -             |
        | 0     | 5   | orders   | a   | -100       | reject   | lag                 | -       | -         | -             |
        | 1     | 0   | orders   | a   | 900        | admit    | -                   | on_time | 800       | 900           |
        | 1     | 1   | payments | a   | 960        | admit    | -                   | on_time | 820       | 960           |
      And the watermarks table is:
        | batch | seq | node          | watermark |
        | 0     | 1   | orders        | 800       |
        | 0     | 2   | payments      | 820       |
        | 0     | 2   | aggregator    | 800       |
        | 0     | 2   | session_join  | 800       |
        | 0     | 2   | tumbling_join | 800       |
        | 1     | 1   | payments      | 860       |
        | 1     | 2   | orders        | 2000      |
        | 1     | 2   | aggregator    | 860       |
        | 1     | 2   | session_join  | 860       |
        | 1     | 2   | tumbling_join | 860       |
        | 1     | 3   | payments      | 2000      |
        | 1     | 3   | aggregator    | 2000      |
        | 1     | 3   | session_join  | 2000      |
        | 1     | 3   | tumbling_join | 2000      |
      And the pairs table is:
        | batch | seq | join          | key | left_batch | left_seq | left_time | right_batch | right_seq | right_time |
        | 0     | 2   | tumbling_join | a   | 0          | 1        | 900       | 0           | 2         | 920        |
        | 1     | 0   | tumbling_join | a   | 1          | 0        | 900       | 0           | 2         | 920        |
        | 1     | 1   | tumbling_join | a   | 0          | 1        | 900       | 1           | 1         | 960        |
        | 1     | 1   | tumbling_join | a   | 1          | 0        | 900       | 1           | 1         | 960        |
        | 1     | 3   | session_join  | a   | 0          | 1        | 900       | 0           | 2         | 920        |
        | 1     | 3   | session_join  | a   | 0          | 1        | 900       | 1           | 1         | 960        |
        | 1     | 3   | session_join  | a   | 1          | 0        | 900       | 0           | 2         | 920        |
        | 1     | 3   | session_join  | a   | 1          | 0        | 900       | 1           | 1         | 960        |
      And the messages table is:
        | batch | seq | producer | partition | sequence | key | verdict   |
        | 0     | 1   | 1        | 0         | 0        | a   | folded    |
        | 0     | 2   | 2        | 0         | 0        | a   | folded    |
        | 1     | 0   | 1        | 0         | 0        | a   | duplicate |
        | 1     | 1   | 2        | 0         | 1        | a   | folded    |
      And the aggregates table is:
        | batch | key | kind | number | count |
        | 0     | a   | sum  | 12.0   | -     |
        | 1     | a   | sum  | 14.0   | -     |
      And the progress is:
        | batch | admitted | rejected | shed | throttled | dropped_late | side_output | reassigned | pairs | folded | duplicates | outside_window | watermark |
        | 0     | 3        | 2        | 0    | 0         | 1            | 0           | 0          | 1     | 2      | 0          | 0              | 800       |
        | 1     | 5        | 2        | 0    | 0         | 1            | 0           | 0          | 8     | 3      | 1          | 0              | 2000      |
      And the join_late table is empty
      And there are no errors

  Rule: Which operators see which events

    @OXP-R5 @OXP-R2 @OXP-R10
    Scenario: A shed event reaches no generator and no aggregator; a critical one passes
      Above a threshold of 0 at full load the shedder drops every event it may: a normal
      event is shed, a critical one never (spec/sla_admission.md). The shed event neither
      moves its stream's watermark nor counts in the aggregate.
      Given pipeline configured with:
        | setting     | value                                                                                       |
        | admission   | {"streams": {"s": {"class": "Gold"}}, "shedder": {"threshold": 0, "max_drop": 1000}} |
        | aggregation | {"aggregate": "count"}                                                                      |
      When these items arrive in one batch:
        | kind  | stream | key | event_time | priority | producer | partition | sequence | metrics      |
        | load  |        |     |            |          |          |           |          | {"cpu": 100} |
        | event | s      | k   | 500        | 1        | 1        | 0         | 0        |              |
        | event | s      | k   | 200        | 3        | 1        | 0         | 1        |              |
      Then the ingress table is:
        | batch | seq | stream | event_time | decision | verdict | watermark | assigned_time |
        | 0     | 1   | s      | 500        | shed     | -       | -         | -             |
        | 0     | 2   | s      | 200        | admit    | on_time | -         | 200           |
      And the watermarks table is:
        | batch | seq | node       | watermark |
        | 0     | 2   | s          | 200       |
        | 0     | 2   | aggregator | 200       |
      And the aggregates table is:
        | batch | key | kind  | number | count |
        | 0     | k   | count | -      | 1     |
      And the progress is:
        | batch | admitted | shed | folded | watermark |
        | 0     | 1        | 1    | 1      | 200       |

    @OXP-R7 @OXP-R5 @OXP-R3 @OXP-R10
    Scenario: A reassigned event joins at its stream's watermark, and the session join finds it late there
      Both streams' watermarks are 100 when the left event at 50 arrives, 50 ms late: the
      Reassign policy moves it to 100. The tumbling join pairs it at 100; the session join
      drops it, since an event at the watermark is late there (spec/window_joins.md OXJ-R14),
      so its sessions hold only the events at 100.
      Given pipeline configured with:
        | setting       | value                                                                                      |
        | admission     | {"streams": {"l": {"class": "Gold", "max_lag": 10000}, "r": {"class": "Gold", "max_lag": 10000}}} |
        | late          | {"policy": "Reassign", "max_lateness": 500}                                                |
        | tumbling_join | {"size_ms": 1000, "left": ["l"], "right": ["r"]}                                           |
        | session_join  | {"gap_ms": 10, "left": ["l"], "right": ["r"]}                                              |
      When these items arrive in one batch:
        | kind      | stream | key | event_time | producer | partition | sequence | time |
        | event     | l      | a   | 100        | 1        | 0         | 0        |      |
        | event     | r      | a   | 100        | 2        | 0         | 0        |      |
        | event     | l      | a   | 50         | 1        | 0         | 1        |      |
        | watermark | l      |     |            |          |           |          | 1000 |
        | watermark | r      |     |            |          |           |          | 1000 |
      Then the ingress table is:
        | seq | stream | event_time | verdict    | watermark | assigned_time |
        | 0   | l      | 100        | on_time    | -         | 100           |
        | 1   | r      | 100        | on_time    | -         | 100           |
        | 2   | l      | 50         | reassigned | 100       | 100           |
      And the pairs table is:
        | seq | join          | left_seq | left_time | right_seq | right_time |
        | 1   | tumbling_join | 0        | 100       | 1         | 100        |
        | 2   | tumbling_join | 2        | 100       | 1         | 100        |
        | 4   | session_join  | 0        | 100       | 1         | 100        |
      And the join_late table is:
        | batch | seq | join         | side | key | event_time | watermark |
        | 0     | 2   | session_join | left | a   | 100        | 100       |
      And the progress is:
        | batch | admitted | reassigned | pairs | folded |
        | 0     | 3        | 1          | 3     | 3      |

    @OXP-R3 @OXP-R13
    Scenario Outline: The session join takes its own gap: a right event one gap after the left one pairs, one ms more does not
      The left session [100, 100] reaches 110 with a gap of 10 ms (spec/window_joins.md OXJ-R13); the
      closing watermarks release whatever pairs there are.
      Given pipeline configured with:
        | setting      | value                                                                                      |
        | admission    | {"streams": {"l": {"class": "Gold", "max_lag": 10000}, "r": {"class": "Gold", "max_lag": 10000}}} |
        | session_join | {"gap_ms": 10, "left": ["l"], "right": ["r"]}                                              |
      When these items arrive in one batch:
        | kind      | stream | key | event_time | producer | partition | sequence | time |
        | event     | l      | a   | 100        | 1        | 0         | 0        |      |
        | event     | r      | a   | <right>    | 2        | 0         | 0        |      |
        | watermark | l      |     |            |          |           |          | 1000 |
        | watermark | r      |     |            |          |           |          | 1000 |
      Then the progress is:
        | batch | admitted | pairs   | watermark |
        | 0     | 2        | <pairs> | 1000      |
      And the join_late table is empty

      Examples:
        | right | pairs |
        | 110   | 1     |
        | 111   | 0     |

  Rule: How watermarks flow between operators

    @OXP-R8 @OXP-R2 @OXP-R6 @OXP-R14
    Scenario: An idle stream holds the joins back until it reports its own watermark, which cannot go back
      The right stream sends one event and goes quiet: the session join's watermark stays at
      the right stream's 7 although the left one is at 100. Its reported watermark of 50 lets
      the join close both sessions. A lower report is an error; the late right event at 45 is
      dropped and its generator's emission of 45 is below 50, so nothing moves.
      Given pipeline configured with:
        | setting      | value                                                                  |
        | admission    | {"streams": {"l": {"class": "Gold", "max_lag": 10000}, "r": {"class": "Gold", "max_lag": 10000}}} |
        | session_join | {"gap_ms": 5, "left": ["l"], "right": ["r"]}                         |
      When these items arrive in one batch:
        | kind  | stream | key | event_time | producer | partition | sequence |
        | event | l      | a   | 5          | 1        | 0         | 0        |
        | event | r      | a   | 7          | 2        | 0         | 0        |
        | event | l      | a   | 100        | 1        | 0         | 1        |
      And these items arrive in the next batch:
        | kind      | stream | key | event_time | producer | partition | sequence | time |
        | watermark | r      |     |            |          |           |          | 50   |
        | watermark | r      |     |            |          |           |          | 40   |
        | event     | r      | a   | 45         | 2        | 0         | 1        |      |
      Then the watermarks table is:
        | batch | seq | node         | watermark |
        | 0     | 0   | l            | 5         |
        | 0     | 1   | r            | 7         |
        | 0     | 1   | aggregator   | 5         |
        | 0     | 1   | session_join | 5         |
        | 0     | 2   | l            | 100       |
        | 0     | 2   | aggregator   | 7         |
        | 0     | 2   | session_join | 7         |
        | 1     | 0   | r            | 50        |
        | 1     | 0   | aggregator   | 50        |
        | 1     | 0   | session_join | 50        |
      And the pairs table is:
        | batch | seq | join         | left_seq | left_time | right_seq | right_time |
        | 1     | 0   | session_join | 0        | 5         | 1         | 7          |
      And the ingress table is:
        | batch | seq | stream | event_time | verdict | watermark |
        | 0     | 0   | l      | 5          | on_time | -         |
        | 0     | 1   | r      | 7          | on_time | -         |
        | 0     | 2   | l      | 100        | on_time | 5         |
        | 1     | 2   | r      | 45         | dropped | 50        |
      And the errors are:
        | batch | seq | reason              |
        | 1     | 1   | watermark_regressed |

  Rule: The trace

    @OXP-R12 @OXP-R4
    Scenario Outline: Where a micro-batch ends changes no answer but its batch numbers
      The same items, cut into one batch or two: the same verdicts, the same pairs of the same events,
      the same aggregate. The re-delivered left event sits exactly at its stream's watermark, so
      the session join drops it as late either way (spec/window_joins.md OXJ-R14).
      Given pipeline configured with:
        | setting      | value                                                                                      |
        | admission    | {"streams": {"l": {"class": "Gold", "max_lag": 10000}, "r": {"class": "Gold", "max_lag": 10000}}} |
        | session_join | {"gap_ms": 10, "left": ["l"], "right": ["r"]}                                              |
      When these items arrive in one batch:
        | kind  | stream | key | event_time | value | producer | partition | sequence |
        | event | l      | a   | 100        | 3     | 1        | 0         | 0        |
        | event | r      | a   | 105        | 4     | 2        | 0         | 0        |
      And these items arrive <where>:
        | kind      | stream | key | event_time | value | producer | partition | sequence | time |
        | event     | l      | a   | 100        | 3     | 1        | 0         | 0        |      |
        | watermark | l      |     |            |       |          |           |          | 1000 |
        | watermark | r      |     |            |       |          |           |          | 1000 |
      Then the ingress table is:
        | stream | event_time | decision | verdict | watermark | assigned_time |
        | l      | 100        | admit    | on_time | -         | 100           |
        | l      | 100        | admit    | on_time | 100       | 100           |
        | r      | 105        | admit    | on_time | -         | 105           |
      And the pairs table is:
        | join         | key | left_time | left_value | right_time | right_value |
        | session_join | a   | 100       | 3          | 105        | 4           |
      And the join_late table is:
        | join         | side | key | event_time | watermark |
        | session_join | left | a   | 100        | 100       |
      And the messages table is:
        | producer | sequence | verdict   |
        | 1        | 0        | duplicate |
        | 1        | 0        | folded    |
        | 2        | 0        | folded    |
      And the aggregates table is:
        | key | kind | number | count |
        | a   | sum  | 7.0    | -     |

      Examples:
        | where             |
        | in the same batch |
        | in the next batch |

    @OXP-R14
    Scenario: Malformed items are error rows that reach no operator, checked in order
      Given pipeline configured with:
        | setting   | value                                  |
        | admission | {"streams": {"s": {"class": "Gold"}}} |
      When these items arrive in one batch:
        | kind      | stream | key | event_time | priority | producer | partition | sequence | time |
        | event     |        | k   | 1          |          | 1        | 0         | 0        |      |
        | event     | s      | k   |            |          | 1        | 0         | 0        |      |
        | event     | s      | k   | 1          | 4        | 1        | 0         | 0        |      |
        | event     | s      |     | 1          |          | 1        | 0         | 0        |      |
        | event     | s      | k   | 1          |          | 1        |           | 0        |      |
        | event     | s      | k   | 1          |          | 1        | 0         | -1       |      |
        | watermark |        |     |            |          |          |           |          | 5    |
        | watermark | t      |     |            |          |          |           |          | 5    |
        | watermark | s      |     |            |          |          |           |          |      |
        | clock     |        |     |            |          |          |           |          | 10   |
        | clock     |        |     |            |          |          |           |          | 9    |
        | end       |        |     |            |          |          |           |          |      |
        | load      |        |     |            |          |          |           |          |      |
      Then the errors are:
        | batch | seq | reason               |
        | 0     | 0   | missing_stream       |
        | 0     | 1   | missing_event_time   |
        | 0     | 2   | invalid_priority     |
        | 0     | 3   | missing_key          |
        | 0     | 4   | missing_id           |
        | 0     | 5   | invalid_sequence     |
        | 0     | 6   | missing_stream       |
        | 0     | 7   | unknown_stream       |
        | 0     | 8   | missing_time         |
        | 0     | 10  | clock_went_backwards |
        | 0     | 11  | unsupported_item     |
        | 0     | 12  | invalid_load         |
      And the ingress table is empty
      And the watermarks table is empty
      And the progress is:
        | batch | admitted | rejected | folded | watermark |
        | 0     | 0        | 0        | 0      | -         |

    @OXP-R13
    Scenario Outline: A configuration the pipeline or one of its operators refuses is refused before any item
      Given pipeline configured with:
        | setting   | value                                                                            |
        | admission | {"streams": {"l": {"class": "Gold"}, "r": {"class": "Gold"}}} |
      And the setting <setting> is <value>
      When these items arrive in one batch:
        | kind  | stream | key | event_time | producer | partition | sequence |
        | event | l      | k   | 1          | 1        | 0         | 0        |
      Then the configuration is rejected naming <named>

      Examples:
        | setting       | value                                                   | named               |
        | admission     | left out                                                | admission           |
        | fusion        | {"batch_size": 10}                                      | fusion              |
        | tumbling_join | {"size_ms": 10, "left": ["l"], "right": ["x"]}          | x                   |
        | tumbling_join | {"size_ms": 10, "left": ["l"], "right": ["l", "r"]}     | l                   |
        | tumbling_join | {"size_ms": 10, "left": [], "right": ["r"]}             | left                |
        | tumbling_join | {"left": ["l"], "right": ["r"]}                         | size_ms             |
        | session_join  | {"gap_ms": 0, "left": ["l"], "right": ["r"]}            | gap_ms              |
        | late          | {"policy": "Drop", "window_size": 10}                   | window_size         |
        | late          | {"policy": "Reassign"}                                  | max_lateness        |
        | watermarks    | {"advance_threshold": 0}                                | advance_threshold   |
        | watermarks    | {"delay": 5}                                            | delay               |
        | aggregation   | {"dedup_window": 0}                                     | dedup_window        |
        | admission     | {"streams": {"l": {"class": "Tin"}}}                    | class               |
