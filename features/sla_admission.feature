@OXS
Feature: SLA admission and backpressure
  Every stream has a service-level agreement: a class that fixes its token bucket and its
  lag budget, an optional rate cap, jitter budget and cost per event. Each event passes a
  lag, a jitter and a rate check, in that order; an event the agreement admits may still
  be shed or throttled by the load shedder, as the policy says. Clauses:
  spec/sla_admission.md.

  Times are milliseconds. An event's arrival time ("now") is the processing clock, which
  starts at 0 and moves only with clock items, so clock items between the events of one
  batch give them different instants. An event's key names its SLA stream; its priority
  is 0 (low), 1 (normal, also when absent), 2 (high) or 3 (critical). Batches are numbered
  from 0 as in the output tables: each When step that adds items is one new batch unless
  it says "in the same batch" (see harness/steps.py). Token levels are in tokens and may
  have decimals; "-" in an expected table is null. Each draw quoted below is
  reference.sla_admission.draw(seed, stream, position) (OXS-R12).

  Rule: The agreement of a stream

    @OXS-R1 @OXS-R2 @OXS-R6 @OXS-R8
    Scenario Outline: Each class fixes the capacity, the refill and the default lag budget
      One event costing the whole capacity empties the full bucket and a second is refused.
      A second later the bucket holds one second of refill, too little for another event:
      an event exactly max_lag behind passes the lag check and fails the rate check, one a
      millisecond older fails the lag check.
      Given SLA admission with these streams:
        | stream | class   | token_cost |
        | s      | <class> | <capacity> |
      When these events arrive in one batch:
        | key | event_time |
        | s   | 0          |
        | s   | 0          |
      And the processing clock advances to 1000 ms
      And these events arrive in the next batch:
        | key | event_time |
        | s   | <edge>     |
        | s   | <beyond>   |
      Then the decisions are:
        | batch | seq | stream | event_time | now  | decision | reason | tokens_left | lag          |
        | 0     | 0   | s      | 0          | 0    | admit    | -      | 0           | 0            |
        | 0     | 1   | s      | 0          | 0    | reject   | rate   | -           | 0            |
        | 2     | 0   | s      | <edge>     | 1000 | reject   | rate   | -           | <max_lag>    |
        | 2     | 1   | s      | <beyond>   | 1000 | reject   | lag    | -           | <lag_beyond> |
      And the stream statistics are:
        | batch | stream | admitted | rejected_lag | rejected_rate | tokens   |
        | 0     | s      | 1        | 0            | 1             | 0        |
        | 2     | s      | 1        | 1            | 2             | <refill> |

      Examples:
        | class    | capacity | refill | max_lag | edge  | beyond | lag_beyond |
        | Bronze   | 5        | 1      | 5000    | -4000 | -4001  | 5001       |
        | Silver   | 20       | 5      | 2000    | -1000 | -1001  | 2001       |
        | Gold     | 50       | 20     | 500     | 500   | 499    | 501        |
        | Platinum | 200      | 100    | 100     | 900   | 899    | 101        |

    @OXS-R1 @OXS-R2 @OXS-R3 @OXS-R14 @TR-6
    Scenario Outline: A stream's configuration that breaks the rules is refused
      Rates and costs are positive numbers of at most three decimals up to 10^9, a cost fits
      in the class's bucket, lag and jitter budgets are integers >= 0, and class names match
      exactly. An empty class cell leaves the class out.
      Given SLA admission with these streams:
        | stream | class   | <setting> |
        | s      | <class> | <value>   |
      Then the configuration is rejected

      Examples:
        | class   | setting            | value      |
        | Gold    | max_events_per_sec | 0          |
        | Gold    | max_events_per_sec | -5         |
        | Gold    | max_events_per_sec | true       |
        | Gold    | max_events_per_sec | "5"        |
        | Gold    | max_events_per_sec | 1000000001 |
        | Gold    | max_events_per_sec | 0.0005     |
        | Gold    | max_events_per_sec | 2.0001     |
        | Gold    | token_cost         | 0          |
        | Gold    | token_cost         | -1         |
        | Gold    | token_cost         | 0.0001     |
        | Gold    | token_cost         | 50.001     |
        | Bronze  | token_cost         | 6          |
        | Gold    | token_cost         | false      |
        | Gold    | max_lag            | -1         |
        | Gold    | max_lag            | 1.5        |
        | Gold    | max_lag            | "500"      |
        | Gold    | max_lag            | true       |
        | Gold    | jitter_budget_ms   | -1         |
        | Gold    | jitter_budget_ms   | 2.5        |
        | Gold    | rate               | 5          |
        | gold    | max_lag            | 500        |
        | Diamond | max_lag            | 500        |
        |         | max_lag            | 500        |

    @OXS-R3 @OXS-R8
    Scenario: Fractional costs and refills are counted exactly
      A Bronze bucket refills 0.001 tokens per millisecond. Two events of 2.5 tokens empty
      it; at 100 ms it holds 0.1 tokens, at 300 ms 0.3 (not the 0.30000000000000004 of
      adding 0.1 and 0.2 as floats), at 2499 ms 2.499 and at 2500 ms exactly the 2.5 one
      event costs. A stream costing 4.999 keeps 0.001 tokens after its first event and
      2.501 at 2500 ms.
      Given SLA admission with these streams:
        | stream | class  | token_cost |
        | half   | Bronze | 2.5        |
        | milli  | Bronze | 4.999      |
      When these events arrive in one batch:
        | key   | event_time |
        | half  | 0          |
        | half  | 0          |
        | half  | 0          |
        | milli | 0          |
        | milli | 0          |
      And these items arrive in the next batch:
        | kind  | key  | event_time | time |
        | clock |      |            | 100  |
        | event | half | 100        |      |
      And these items arrive in the next batch:
        | kind  | key  | event_time | time |
        | clock |      |            | 300  |
        | event | half | 300        |      |
      And these items arrive in the next batch:
        | kind  | key  | event_time | time |
        | clock |      |            | 2499 |
        | event | half | 2499       |      |
      And these items arrive in the next batch:
        | kind  | key   | event_time | time |
        | clock |       |            | 2500 |
        | event | half  | 2500       |      |
        | event | milli | 2500       |      |
      Then the decisions are:
        | batch | seq | stream | decision | reason | tokens_left |
        | 0     | 0   | half   | admit    | -      | 2.5         |
        | 0     | 1   | half   | admit    | -      | 0           |
        | 0     | 2   | half   | reject   | rate   | -           |
        | 0     | 3   | milli  | admit    | -      | 0.001       |
        | 0     | 4   | milli  | reject   | rate   | -           |
        | 1     | 1   | half   | reject   | rate   | -           |
        | 2     | 1   | half   | reject   | rate   | -           |
        | 3     | 1   | half   | reject   | rate   | -           |
        | 4     | 1   | half   | admit    | -      | 0           |
        | 4     | 2   | milli  | reject   | rate   | -           |
      And the stream statistics are:
        | batch | stream | admitted | rejected_rate | tokens |
        | 0     | half   | 2        | 1             | 0      |
        | 0     | milli  | 1        | 1             | 0.001  |
        | 1     | half   | 2        | 2             | 0.1    |
        | 2     | half   | 2        | 3             | 0.3    |
        | 3     | half   | 2        | 4             | 2.499  |
        | 4     | half   | 3        | 4             | 0      |
        | 4     | milli  | 1        | 2             | 2.501  |

    @OXS-R4 @OXS-R1 @OXS-R3
    Scenario: The rate cap lowers the refill, never raises it, and leaves the burst at the capacity
      Gold refills 20 tokens per second; capped at 5 events per second it refills 5. With a
      cost of 2.5 tokens a cap of 2 events per second refills 5 tokens a second: two events.
      Bronze refills 1 token per second and a cap of 1000 events per second does not raise
      that. Every stream still starts with its class's full bucket.
      Given SLA admission with these streams:
        | stream | class  | max_events_per_sec | token_cost |
        | capped | Gold   | 5                  |            |
        | free   | Gold   |                    |            |
        | costly | Gold   | 2                  | 2.5        |
        | loose  | Bronze | 1000               |            |
      When 51 events of stream capped at 0 ms arrive in one batch
      And 51 events of stream free at 0 ms arrive in the same batch
      And 21 events of stream costly at 0 ms arrive in the same batch
      And 6 events of stream loose at 0 ms arrive in the same batch
      And the processing clock advances to 1000 ms
      And these events arrive in the next batch:
        | key    | event_time |
        | capped | 1000       |
        | free   | 1000       |
        | costly | 1000       |
        | costly | 1000       |
        | costly | 1000       |
        | loose  | 1000       |
      Then the stream statistics in batch 0 are:
        | stream | admitted | rejected_rate | tokens |
        | capped | 50       | 1             | 0      |
        | free   | 50       | 1             | 0      |
        | costly | 20       | 1             | 0      |
        | loose  | 5        | 1             | 0      |
      And the decisions in the last batch are:
        | seq | stream | decision | reason | tokens_left |
        | 0   | capped | admit    | -      | 4           |
        | 1   | free   | admit    | -      | 19          |
        | 2   | costly | admit    | -      | 2.5         |
        | 3   | costly | admit    | -      | 0           |
        | 4   | costly | reject   | rate   | -           |
        | 5   | loose  | admit    | -      | 0           |

    @OXS-R2 @OXS-R3 @OXS-R4
    Scenario: The extreme accepted settings: a cost of 0.001 or of the whole capacity, caps of 10^9 and 0.001
      A cap of 10^9 events per second is above the class's refill and changes nothing. A cap
      of 0.001 events per second with a cost of 5 tokens refills 0.005 tokens per second:
      the bucket emptied at 0 is full again after 1000 s, and not a millisecond earlier.
      Given SLA admission with these streams:
        | stream | class  | max_events_per_sec | token_cost |
        | fast   | Gold   | 1000000000         | 0.001      |
        | slow   | Bronze | 0.001              | 5          |
      When these events arrive in one batch:
        | key  | event_time |
        | fast | 0          |
        | slow | 0          |
        | slow | 0          |
      And these items arrive in the next batch:
        | kind  | key  | event_time | time    |
        | clock |      |            | 999999  |
        | event | slow | 999999     |         |
        | clock |      |            | 1000000 |
        | event | slow | 1000000    |         |
        | event | fast | 1000000    |         |
      Then the decisions are:
        | batch | seq | stream | decision | reason | tokens_left |
        | 0     | 0   | fast   | admit    | -      | 49.999      |
        | 0     | 1   | slow   | admit    | -      | 0           |
        | 0     | 2   | slow   | reject   | rate   | -           |
        | 1     | 1   | slow   | reject   | rate   | -           |
        | 1     | 3   | slow   | admit    | -      | 0           |
        | 1     | 4   | fast   | admit    | -      | 49.999      |
      And the stream statistics in the last batch are:
        | stream | admitted | rejected_rate | tokens |
        | slow   | 2        | 2             | 0      |
        | fast   | 2        | 0             | 49.999 |

  Rule: The three checks

    @OXS-R5 @OXS-R6 @OXS-R7 @OXS-R8 @OXS-R16
    Scenario: The first failing check decides, and the checks after it are not made
      The first event empties the bucket. At 2000 ms an event 2000 ms behind fails the lag
      check (the rate check would fail too) and leaves the jitter reference at 0, so at
      3500 ms the jitter check fails (before the rate check, which would fail too). That
      event becomes the reference; at 5000 ms the gap is 1500 ms and the bucket is full.
      Only the rate check refills: after an event rejected for its lag at 6000 ms the
      reported level is still the 0 left at 5000 ms.
      Given SLA admission with these streams:
        | stream | class  | token_cost | max_lag | jitter_budget_ms |
        | s      | Bronze | 5          | 1000    | 3000             |
      When these items arrive in one batch:
        | kind  | key | event_time | time |
        | event | s   | 0          |      |
        | clock |     |            | 2000 |
        | event | s   | 0          |      |
        | clock |     |            | 3500 |
        | event | s   | 3500       |      |
        | clock |     |            | 5000 |
        | event | s   | 5000       |      |
      And these items arrive in the next batch:
        | kind  | key | event_time | time |
        | clock |     |            | 6000 |
        | event | s   | 0          |      |
      Then the decisions are:
        | batch | seq | event_time | now  | decision | reason | tokens_left | lag  |
        | 0     | 0   | 0          | 0    | admit    | -      | 0           | 0    |
        | 0     | 2   | 0          | 2000 | reject   | lag    | -           | 2000 |
        | 0     | 4   | 3500       | 3500 | reject   | jitter | -           | 0    |
        | 0     | 6   | 5000       | 5000 | admit    | -      | 0           | 0    |
        | 1     | 1   | 0          | 6000 | reject   | lag    | -           | 6000 |
      And the stream statistics are:
        | batch | stream | admitted | rejected_lag | rejected_jitter | rejected_rate | tokens |
        | 0     | s      | 2        | 1            | 1               | 0             | 0      |
        | 1     | s      | 2        | 2            | 1               | 0             | 0      |

    @OXS-R6 @OXS-R1 @OXS-R2
    Scenario: A lag equal to max_lag passes, one more fails, and an event from the future has lag 0
      Gold's default max_lag is 500 ms and Bronze's 5000 ms (an empty cell leaves the
      setting out, null sets it to null: both mean the default). An event stamped after its
      arrival keeps its own time and has lag 0, even under a max_lag of 0.
      Given SLA admission with these streams:
        | stream | class  | max_lag |
        | gold   | Gold   |         |
        | strict | Gold   | 0       |
        | nulls  | Bronze | null    |
      When the processing clock advances to 10000 ms
      And these events arrive in the next batch:
        | key    | event_time |
        | gold   | 9500       |
        | gold   | 9499       |
        | gold   | 12000      |
        | strict | 10000      |
        | strict | 9999       |
        | strict | 10001      |
        | nulls  | 5000       |
        | nulls  | 4999       |
      Then the decisions in the last batch are:
        | seq | stream | event_time | now   | decision | reason | tokens_left | lag  |
        | 0   | gold   | 9500       | 10000 | admit    | -      | 49          | 500  |
        | 1   | gold   | 9499       | 10000 | reject   | lag    | -           | 501  |
        | 2   | gold   | 12000      | 10000 | admit    | -      | 48          | 0    |
        | 3   | strict | 10000      | 10000 | admit    | -      | 49          | 0    |
        | 4   | strict | 9999       | 10000 | reject   | lag    | -           | 1    |
        | 5   | strict | 10001      | 10000 | admit    | -      | 48          | 0    |
        | 6   | nulls  | 5000       | 10000 | admit    | -      | 4           | 5000 |
        | 7   | nulls  | 4999       | 10000 | reject   | lag    | -           | 5001 |

    @OXS-R7 @OXS-R2 @OXS-R16
    Scenario: A gap equal to the jitter budget passes, one more fails, and the stream recovers
      The first event has no reference and passes. The event that finds a gap of 1001 ms is
      rejected and becomes the new reference, so the next one, 499 ms later, passes. After a
      silence far longer than the budget one event is rejected and the next, judged from it,
      passes. A stream without a jitter budget is never rejected for jitter.
      Given SLA admission with these streams:
        | stream | class | jitter_budget_ms |
        | steady | Gold  | 1000             |
        | free   | Gold  |                  |
      When these items arrive in one batch:
        | kind  | key    | event_time | time |
        | event | steady | 0          |      |
        | event | free   | 0          |      |
        | clock |        |            | 1000 |
        | event | steady | 1000       |      |
        | clock |        |            | 2001 |
        | event | steady | 2001       |      |
        | clock |        |            | 2500 |
        | event | steady | 2500       |      |
      And the processing clock advances to 60000 ms
      And these events arrive in the next batch:
        | key    | event_time |
        | steady | 60000      |
        | steady | 60000      |
        | free   | 60000      |
      Then the decisions are:
        | batch | seq | stream | now   | decision | reason |
        | 0     | 0   | steady | 0     | admit    | -      |
        | 0     | 1   | free   | 0     | admit    | -      |
        | 0     | 3   | steady | 1000  | admit    | -      |
        | 0     | 5   | steady | 2001  | reject   | jitter |
        | 0     | 7   | steady | 2500  | admit    | -      |
        | 2     | 0   | steady | 60000 | reject   | jitter |
        | 2     | 1   | steady | 60000 | admit    | -      |
        | 2     | 2   | free   | 60000 | admit    | -      |
      And the stream statistics in the last batch are:
        | stream | admitted | rejected_jitter |
        | steady | 4        | 2               |
        | free   | 2        | 0               |

    @OXS-R7 @OXS-R5 @OXS-R8 @OXS-R16
    Scenario: Events rejected for lag or for rate do not move the jitter reference
      The only event admitted early is at 0. The lag rejection and the rate rejection at
      900 ms leave the reference at 0, so at 1500 ms the gap is 1500 ms and the jitter check
      fails; that event becomes the reference. The rate rejection at 2400 ms does not move
      it, so at 5000 ms the gap is 3500 ms: rejected again, and the next event at 5000 ms
      finds a full bucket.
      Given SLA admission with these streams:
        | stream | class  | token_cost | max_lag | jitter_budget_ms |
        | tight  | Bronze | 5          | 100     | 1000             |
      When these items arrive in one batch:
        | kind  | key   | event_time | time |
        | event | tight | 0          |      |
        | clock |       |            | 900  |
        | event | tight | 0          |      |
        | event | tight | 900        |      |
        | clock |       |            | 1500 |
        | event | tight | 1500       |      |
        | clock |       |            | 2400 |
        | event | tight | 2400       |      |
        | clock |       |            | 5000 |
        | event | tight | 5000       |      |
        | event | tight | 5000       |      |
      Then the decisions are:
        | seq | now  | decision | reason | tokens_left | lag |
        | 0   | 0    | admit    | -      | 0           | 0   |
        | 2   | 900  | reject   | lag    | -           | 900 |
        | 3   | 900  | reject   | rate   | -           | 0   |
        | 5   | 1500 | reject   | jitter | -           | 0   |
        | 7   | 2400 | reject   | rate   | -           | 0   |
        | 9   | 5000 | reject   | jitter | -           | 0   |
        | 10  | 5000 | admit    | -      | 0           | 0   |

    @OXS-R8 @OXS-R1 @OXS-R16
    Scenario: A burst takes the full bucket, then each event waits for its refill, which stops at the capacity
      Silver holds 20 tokens and refills 0.005 per millisecond. The clock items between the
      events of one batch give each event its own instant: at 199 ms the emptied bucket
      holds 0.995 tokens, at 200 ms one token; after a long pause it holds 20, not more.
      Given SLA admission with these streams:
        | stream | class  |
        | s      | Silver |
      When 21 events of stream s at 0 ms arrive in one batch
      And these items arrive in the next batch:
        | kind  | key | event_time | time  |
        | clock |     |            | 199   |
        | event | s   | 199        |       |
        | clock |     |            | 200   |
        | event | s   | 200        |       |
        | event | s   | 200        |       |
        | clock |     |            | 10000 |
        | event | s   | 10000      |       |
      Then the stream statistics are:
        | batch | stream | admitted | rejected_rate | tokens |
        | 0     | s      | 20       | 1             | 0      |
        | 1     | s      | 22       | 3             | 19     |
      And the decisions in the last batch are:
        | seq | event_time | now   | decision | reason | tokens_left |
        | 1   | 199        | 199   | reject   | rate   | -           |
        | 3   | 200        | 200   | admit    | -      | 0           |
        | 4   | 200        | 200   | reject   | rate   | -           |
        | 6   | 10000      | 10000 | admit    | -      | 19          |

    @OXS-R8 @OXS-R3
    Scenario: Partial tokens count: a bucket at 0.5 tokens admits an event costing 0.5
      Given SLA admission with these streams:
        | stream | class  | token_cost |
        | s      | Bronze | 0.5        |
      When 11 events of stream s at 0 ms arrive in one batch
      And these items arrive in the next batch:
        | kind  | key | event_time | time |
        | clock |     |            | 499  |
        | event | s   | 499        |      |
      And these items arrive in the next batch:
        | kind  | key | event_time | time |
        | clock |     |            | 500  |
        | event | s   | 500        |      |
        | event | s   | 500        |      |
      Then the stream statistics are:
        | batch | stream | admitted | rejected_rate | tokens |
        | 0     | s      | 10       | 1             | 0      |
        | 1     | s      | 10       | 2             | 0.499  |
        | 2     | s      | 11       | 3             | 0      |
      And the decisions in the last batch are:
        | seq | event_time | now | decision | reason | tokens_left |
        | 1   | 500        | 500 | admit    | -      | 0           |
        | 2   | 500        | 500 | reject   | rate   | -           |

    @OXS-R9 @OXS-R15 @OXS-R17
    Scenario: An event of a stream never registered is rejected and touches no stream
      Given SLA admission with these streams:
        | stream | class  | token_cost |
        | a      | Bronze | 2          |
      When these events arrive in one batch:
        | key   | event_time |
        | a     | 0          |
        | ghost | 0          |
        | a     | 0          |
        | a     | 0          |
      Then the decisions are:
        | seq | stream | decision | reason              | tokens_left | lag |
        | 0   | a      | admit    | -                   | 3           | 0   |
        | 1   | ghost  | reject   | unregistered_stream | -           | -   |
        | 2   | a      | admit    | -                   | 1           | 0   |
        | 3   | a      | reject   | rate                | -           | 0   |
      And the stream statistics are:
        | batch | stream | admitted | rejected_lag | rejected_jitter | rejected_rate | shed | throttled | tokens |
        | 0     | a      | 2        | 0            | 0               | 1             | 0    | 0         | 1      |
      And the progress is:
        | batch | admitted | rejected | shed | throttled | load_score |
        | 0     | 2        | 2        | 0    | 0         | -          |
      And there are no errors

  Rule: The load shedder

    @OXS-R10 @OXS-R14 @OXS-R15 @OXS-R17
    Scenario: The load score is the most saturated resource, and a metric left out keeps its value
      With a queue capacity of 200 and a latency target of 400 ms: every metric is 0 until
      reported; cpu 45 scores 450; memory 62 scores 620 while cpu stays 45; a queue of 150
      scores 750; a queue of 1000 is capped at 1000; latency 333 scores 832
      (1000 * 333 // 400). The score at the end of a batch is the one in its progress row.
      Given SLA admission with these streams:
        | stream | class |
        | s      | Gold  |
      And a load shedder with queue_capacity 200 and latency_target_ms 400
      When an empty batch passes
      And the load is reported as cpu 45
      And the load is reported as memory 62
      And the load is reported as queue_depth 150
      And the load is reported as queue_depth 1000
      And the load is reported as queue_depth 0 and latency 333
      And the load is reported as cpu 0, memory 0 and latency 0
      And the load is reported as cpu 90
      And the load is reported as cpu 10 in the same batch
      Then the progress is:
        | batch | load_score |
        | 0     | 0          |
        | 1     | 450        |
        | 2     | 620        |
        | 3     | 750        |
        | 4     | 1000       |
        | 5     | 832        |
        | 6     | 0          |
        | 7     | 100        |

    @OXS-R11 @OXS-R12 @OXS-R13 @OXS-R14
    Scenario: The drop probability rises above the threshold, priorities scale it, critical events are never shed
      Threshold 700, max_drop 1000, seed 0 and the default policy, Strict. At a score of 700
      the probability is 0: low events with draws 805 and 19 are kept. At 800 it is
      (800 - 700) * 1000 // 300 = 333 for normal events, 666 for low, 166 for high and 0
      for critical; at 1000 it is 1000, 1000, 500 and 0. An event is shed when its draw is
      below its probability. Stream s draws, with seed 0, at positions 0 to 12: 805, 19,
      574, 859, 139, 458, 249, 522, 58, 472, 164, 780, 576. So at 800: low 574 shed, low 859
      kept, high 139 shed, normal 458 kept, high 249 kept, critical 522 kept, normal (no
      priority) 58 shed; at 1000: critical 472 kept, high 164 shed, high 780 kept, normal
      576 shed. Shed events spent their tokens.
      Given SLA admission with these streams:
        | stream | class    |
        | s      | Platinum |
      And a load shedder with seed 0 and threshold 700
      When the load is reported as cpu 70
      And these events arrive in the same batch:
        | key | event_time | priority |
        | s   | 0          | 0        |
        | s   | 0          | 0        |
      And the load is reported as cpu 80
      And these events arrive in the same batch:
        | key | event_time | priority |
        | s   | 0          | 0        |
        | s   | 0          | 0        |
        | s   | 0          | 2        |
        | s   | 0          | 1        |
        | s   | 0          | 2        |
        | s   | 0          | 3        |
        | s   | 0          |          |
      And the load is reported as cpu 100
      And these events arrive in the same batch:
        | key | event_time | priority |
        | s   | 0          | 3        |
        | s   | 0          | 2        |
        | s   | 0          | 2        |
        | s   | 0          | 1        |
      Then the decisions are:
        | batch | seq | decision | reason | tokens_left |
        | 0     | 1   | admit    | -      | 199         |
        | 0     | 2   | admit    | -      | 198         |
        | 1     | 1   | shed     | -      | 197         |
        | 1     | 2   | admit    | -      | 196         |
        | 1     | 3   | shed     | -      | 195         |
        | 1     | 4   | admit    | -      | 194         |
        | 1     | 5   | admit    | -      | 193         |
        | 1     | 6   | admit    | -      | 192         |
        | 1     | 7   | shed     | -      | 191         |
        | 2     | 1   | admit    | -      | 190         |
        | 2     | 2   | shed     | -      | 189         |
        | 2     | 3   | admit    | -      | 188         |
        | 2     | 4   | shed     | -      | 187         |
      And the stream statistics are:
        | batch | stream | admitted | shed | throttled | tokens |
        | 0     | s      | 2        | 0    | 0         | 198    |
        | 1     | s      | 9        | 3    | 0         | 191    |
        | 2     | s      | 13       | 5    | 0         | 187    |
      And the progress is:
        | batch | admitted | rejected | shed | throttled | load_score |
        | 0     | 2        | 0        | 0    | 0         | 700        |
        | 1     | 6        | 0        | 3    | 0         | 800        |
        | 2     | 8        | 0        | 5    | 0         | 1000       |

    @OXS-R11 @OXS-R12 @OXS-R10 @OXS-R14
    Scenario: max_drop is the probability at full load, and a threshold of 0 counts any load
      Threshold 0 and max_drop 400: a latency at its target scores 1000, where normal events
      are shed with probability 400, low ones with 800 and high ones with 200. Stream s
      draws, with seed 0, 805, 19, 574, 859 and 139 at positions 0 to 4: low 805 kept (it
      would be shed under a max_drop of 1000), high 19 shed, normal 574 kept, low 859 kept,
      normal 139 shed.
      Given SLA admission with these streams:
        | stream | class    |
        | s      | Platinum |
      And a load shedder with threshold 0 and max_drop 400
      When the load is reported as latency 1000
      And these events arrive in the same batch:
        | key | event_time | priority |
        | s   | 0          | 0        |
        | s   | 0          | 2        |
        | s   | 0          | 1        |
        | s   | 0          | 0        |
        | s   | 0          | 1        |
      Then the decisions are:
        | seq | decision | tokens_left |
        | 1   | admit    | 199         |
        | 2   | shed     | 198         |
        | 3   | admit    | 197         |
        | 4   | admit    | 196         |
        | 5   | shed     | 195         |
      And the progress is:
        | batch | admitted | shed | load_score |
        | 0     | 3        | 2    | 1000       |

    @OXS-R12 @OXS-R11 @OXS-R13 @OXS-R18
    Scenario: An event's draw hashes the seed, its stream and its position among the stream's events
      Seed 1 and cpu 90 give a score of 900: normal events are shed with probability 500,
      high ones with 250. Stream s draws, with seed 1, at positions 0 to 6: 232, 409, 733, 5,
      115, 346, 574; stream t draws 282 at its position 0. The event rejected for its lag
      takes position 2: the next normal event draws 5 and is shed (had the rejection not
      counted, it would have drawn 733 and been kept). Stream t counts its own positions:
      its first event draws 282 and is shed (as the sixth event of the trace, position 5,
      it would draw 884 and be kept). Positions run on across batches: the normal events of
      batch 1 draw 346 (shed) and 574 (kept), not 232 and 409 again.
      Given SLA admission with these streams:
        | stream | class    |
        | s      | Platinum |
        | t      | Platinum |
      And a load shedder with seed 1
      When the load is reported as cpu 90
      And these events arrive in the same batch:
        | key | event_time | priority |
        | s   | 0          | 1        |
        | s   | 0          | 2        |
        | s   | -101       | 1        |
        | s   | 0          | 1        |
        | s   | 0          | 2        |
        | t   | 0          | 1        |
      And these events arrive in the next batch:
        | key | event_time |
        | s   | 0          |
        | s   | 0          |
      Then the decisions are:
        | batch | seq | stream | event_time | decision | reason | tokens_left | lag |
        | 0     | 1   | s      | 0          | shed     | -      | 199         | 0   |
        | 0     | 2   | s      | 0          | admit    | -      | 198         | 0   |
        | 0     | 3   | s      | -101       | reject   | lag    | -           | 101 |
        | 0     | 4   | s      | 0          | shed     | -      | 197         | 0   |
        | 0     | 5   | s      | 0          | shed     | -      | 196         | 0   |
        | 0     | 6   | t      | 0          | shed     | -      | 199         | 0   |
        | 1     | 0   | s      | 0          | shed     | -      | 195         | 0   |
        | 1     | 1   | s      | 0          | admit    | -      | 194         | 0   |

  Rule: The coordinator

    @OXS-R13 @OXS-R17 @OXS-R19
    Scenario Outline: The policy decides what a drop means, and a shed or throttled event spent its tokens
      At cpu 100 the score is 1000 and every normal or low event the SLA admits would be
      dropped whatever its draw (probability 1000); the critical one never is. Under
      BypassShedder the shedder is not asked. The five events the SLA admits empty the
      Bronze bucket under every policy, so the sixth is rejected for rate: every decision
      is a row of the same table.
      Given SLA admission with these streams:
        | stream | class  |
        | s      | Bronze |
      And the policy is <policy>
      And a load shedder with the default settings
      When the load is reported as cpu 100
      And these events arrive in the next batch:
        | key | event_time | priority |
        | s   | 0          |          |
        | s   | 0          | 3        |
        | s   | 0          |          |
        | s   | 0          | 0        |
        | s   | 0          | 1        |
        | s   | 0          |          |
      Then the decisions are:
        | batch | seq | decision  | reason | tokens_left |
        | 1     | 0   | <dropped> | -      | 4           |
        | 1     | 1   | admit     | -      | 3           |
        | 1     | 2   | <dropped> | -      | 2           |
        | 1     | 3   | <dropped> | -      | 1           |
        | 1     | 4   | <dropped> | -      | 0           |
        | 1     | 5   | reject    | rate   | -           |
      And the stream statistics are:
        | batch | stream | admitted | rejected_rate | shed   | throttled   | tokens |
        | 1     | s      | 5        | 1             | <shed> | <throttled> | 0      |
      And the progress is:
        | batch | admitted   | rejected | shed   | throttled   | load_score |
        | 0     | 0          | 0        | 0      | 0           | 1000       |
        | 1     | <admitted> | 1        | <shed> | <throttled> | 1000       |

      Examples:
        | policy         | dropped  | admitted | shed | throttled |
        | Strict         | shed     | 1        | 4    | 0         |
        | PreferThrottle | throttle | 1        | 0    | 4         |
        | BypassShedder  | admit    | 5        | 0    | 0         |

    @OXS-R13 @OXS-R14 @OXS-R10 @OXS-R15
    Scenario: Without a shedder, load reports are checked and kept but shed nothing
      Given SLA admission with these streams:
        | stream | class  |
        | s      | Bronze |
      And the policy is PreferThrottle
      When the load is reported as cpu 100
      And these items arrive in the same batch:
        | kind  | key | event_time | priority | metrics      |
        | event | s   | 0          | 0        |              |
        | load  |     |            |          | {"cpu": 101} |
        | event | s   | 0          |          |              |
      Then the decisions are:
        | seq | decision | tokens_left |
        | 1   | admit    | 4           |
        | 3   | admit    | 3           |
      And the errors are:
        | batch | seq | reason       |
        | 0     | 2   | invalid_load |
      And the progress is:
        | batch | admitted | rejected | shed | throttled | load_score |
        | 0     | 2        | 0        | 0    | 0         | -          |

  Rule: The stream

    @OXS-R14 @OXS-R13 @TR-6
    Scenario Outline: A trace configuration that breaks the rules is refused
      Given sla admission configured with:
        | setting   | value   |
        | <setting> | <value> |
      Then the configuration is rejected

      Examples:
        | setting  | value                         |
        | policy   | Lenient                       |
        | policy   | strict                        |
        | policy   | 1                             |
        | shedder  | 5                             |
        | shedder  | []                            |
        | shedder  | {"threshold": 1000}           |
        | shedder  | {"threshold": -1}             |
        | shedder  | {"max_drop": 1001}            |
        | shedder  | {"max_drop": 0.5}             |
        | shedder  | {"queue_capacity": 0}         |
        | shedder  | {"latency_target_ms": 0}      |
        | shedder  | {"seed": 1.5}                 |
        | shedder  | {"seed": true}                |
        | shedder  | {"seed": "7"}                 |
        | shedder  | {"seed": 9223372036854775808} |
        | shedder  | {"rate": 1}                   |
        | streams  | []                            |
        | streams  | {"s": "Gold"}                 |
        | streams  | {"s": {"token_cost": 2}}      |
        | priority | 1                             |

    @OXS-R15 @OXS-R9 @TR-7 @TR-4
    Scenario: Malformed items are error rows, with the first reason in the clause's order, and change nothing
      No malformed item changes anything: the rejected cpu 100 leaves the score at 0, so the
      low event at the end is kept; the clock stays at 500; the stream's bucket loses one
      token only. An event of an unregistered stream is a decision, not an error.
      Given SLA admission with these streams:
        | stream | class |
        | s      | Gold  |
      And a load shedder with the default settings
      When these items arrive in one batch:
        | kind      | key   | event_time | priority | time | metrics                     |
        | idle      | s     |            |          |      |                             |
        | watermark |       |            |          | 5    |                             |
        | event     |       |            | 9        |      |                             |
        | event     |       | 5          |          |      |                             |
        | event     | s     |            | 9        |      |                             |
        | event     | s     | 0          | 4        |      |                             |
        | event     | s     | 0          | -1       |      |                             |
        | clock     |       |            |          |      |                             |
        | clock     |       |            |          | 500  |                             |
        | clock     |       |            |          | 400  |                             |
        | load      |       |            |          |      |                             |
        | load      |       |            |          |      | {}                          |
        | load      |       |            |          |      | {"gpu": 5}                  |
        | load      |       |            |          |      | {"cpu": 101}                |
        | load      |       |            |          |      | {"memory": -1}              |
        | load      |       |            |          |      | {"queue_depth": -1}         |
        | load      |       |            |          |      | {"latency": -5}             |
        | load      |       |            |          |      | {"cpu": 100, "memory": 101} |
        | event     | s     | 500        | 0        |      |                             |
        | event     | ghost | 500        |          |      |                             |
      Then the errors are:
        | batch | seq | reason               |
        | 0     | 0   | unsupported_item     |
        | 0     | 1   | unsupported_item     |
        | 0     | 2   | missing_stream       |
        | 0     | 3   | missing_stream       |
        | 0     | 4   | missing_event_time   |
        | 0     | 5   | invalid_priority     |
        | 0     | 6   | invalid_priority     |
        | 0     | 7   | missing_time         |
        | 0     | 9   | clock_went_backwards |
        | 0     | 10  | invalid_load         |
        | 0     | 11  | invalid_load         |
        | 0     | 12  | invalid_load         |
        | 0     | 13  | invalid_load         |
        | 0     | 14  | invalid_load         |
        | 0     | 15  | invalid_load         |
        | 0     | 16  | invalid_load         |
        | 0     | 17  | invalid_load         |
      And the decisions are:
        | seq | stream | event_time | now | decision | reason              | tokens_left | lag |
        | 18  | s      | 500        | 500 | admit    | -                   | 49          | 0   |
        | 19  | ghost  | 500        | 500 | reject   | unregistered_stream | -           | -   |
      And the progress is:
        | batch | admitted | rejected | shed | throttled | load_score |
        | 0     | 1        | 1        | 0    | 0         | 0          |

    @TR-15 @OXS-R15 @TR-7
    Scenario: Every row of a repeated seq is a duplicate_seq error row and is not decided
      The table's two rows at seq 1 were events of stream s: both are error rows, no token
      is spent on them, and the event after them is the second one decided.
      Given SLA admission with these streams:
        | stream | class  |
        | s      | Bronze |
      When these items arrive in one batch:
        | kind          | key | event_time |
        | event         | s   | 0          |
        | duplicate_seq |     |            |
        | duplicate_seq |     |            |
        | event         | s   | 0          |
      Then the errors are:
        | batch | seq | reason        |
        | 0     | 1   | duplicate_seq |
        | 0     | 2   | duplicate_seq |
      And the decisions are:
        | seq | stream | event_time | decision | tokens_left |
        | 0   | s      | 0          | admit    | 4           |
        | 3   | s      | 0          | admit    | 3           |

    @OXS-R15 @TR-14 @TR-7
    Scenario: The end of the input is not an item of this area, and the stream goes on
      Every event is decided when it arrives, so nothing is held back for an end to
      release: an end item is unsupported_item and the event after it is decided as usual.
      Given SLA admission with these streams:
        | stream | class |
        | s      | Gold  |
      When these items arrive in one batch:
        | kind  | key | event_time |
        | event | s   | 0          |
        | end   |     |            |
        | event | s   | 0          |
      Then the errors are:
        | batch | seq | reason           |
        | 0     | 1   | unsupported_item |
      And the decisions are:
        | seq | stream | event_time | decision |
        | 0   | s      | 0          | admit    |
        | 2   | s      | 0          | admit    |

    @OXS-R17 @OXS-R9 @OXS-R19 @TR-5
    Scenario: Every batch has its progress row; a stream has a statistics row only in batches with its events
      Stream quiet never has an event and never a row; the unregistered stream ghost has
      none either, and its event counts among the rejected. Without a shedder the load
      score is null.
      Given SLA admission with these streams:
        | stream | class |
        | a      | Gold  |
        | b      | Gold  |
        | quiet  | Gold  |
      When these events arrive in one batch:
        | key   | event_time |
        | a     | 0          |
        | ghost | 0          |
        | a     | -501       |
      And 2 empty batches pass
      And these events arrive in the next batch:
        | key | event_time |
        | b   | 0          |
      Then the decisions are:
        | batch | seq | stream | event_time | now | decision | reason              | tokens_left | lag |
        | 0     | 0   | a      | 0          | 0   | admit    | -                   | 49          | 0   |
        | 0     | 1   | ghost  | 0          | 0   | reject   | unregistered_stream | -           | -   |
        | 0     | 2   | a      | -501       | 0   | reject   | lag                 | -           | 501 |
        | 3     | 0   | b      | 0          | 0   | admit    | -                   | 49          | 0   |
      And the stream statistics are:
        | batch | stream | admitted | rejected_lag | rejected_jitter | rejected_rate | shed | throttled | tokens |
        | 0     | a      | 1        | 1            | 0               | 0             | 0    | 0         | 49     |
        | 3     | b      | 1        | 0            | 0               | 0             | 0    | 0         | 49     |
      And the progress is:
        | batch | admitted | rejected | shed | throttled | load_score |
        | 0     | 1        | 2        | 0    | 0         | -          |
        | 1     | 1        | 2        | 0    | 0         | -          |
        | 2     | 1        | 2        | 0    | 0         | -          |
        | 3     | 2        | 2        | 0    | 0         | -          |
      And the errors table is empty

    @OXS-R18 @OXS-R7 @OXS-R8 @OXS-R12 @TR-5
    Scenario Outline: Buckets, jitter references, positions, counters, the clock and the metrics cross a restart
      Seed 1 and cpu 90: normal events are throttled below a draw of 500, high ones below
      250. Stream s draws, with seed 1, 232, 409, 733, 5, 115, 346 at positions 0 to 5. After
      the cut the clock is still 100 (so 50 is an error), the bucket still holds 2 tokens,
      the jitter reference is still 100 (so 1101 ms is a gap of 1001), the next position is
      3 (draw 5: throttled) and the score is still 900 without a new load report.
      Given SLA admission with these streams:
        | stream | class  | jitter_budget_ms |
        | s      | Bronze | 1000             |
      And the policy is PreferThrottle
      And a load shedder with seed 1
      When these items arrive in one batch:
        | kind  | key | event_time | priority | time | metrics     |
        | load  |     |            |          |      | {"cpu": 90} |
        | clock |     |            |          | 100  |             |
        | event | s   | 100        |          |      |             |
        | event | s   | 100        |          |      |             |
        | event | s   | 100        | 2        |      |             |
      And the engine <restarts or keeps running>
      And these items arrive in the next batch:
        | kind  | key | event_time | priority | time |
        | clock |     |            |          | 50   |
        | event | s   | 100        |          |      |
        | clock |     |            |          | 1101 |
        | event | s   | 1101       |          |      |
        | event | s   | 1101       |          |      |
        | event | s   | 1101       | 3        |      |
      Then the errors are:
        | batch | seq | reason               |
        | 1     | 0   | clock_went_backwards |
      And the decisions are:
        | batch | seq | event_time | now  | decision | reason | tokens_left |
        | 0     | 2   | 100        | 100  | throttle | -      | 4           |
        | 0     | 3   | 100        | 100  | throttle | -      | 3           |
        | 0     | 4   | 100        | 100  | admit    | -      | 2           |
        | 1     | 1   | 100        | 100  | throttle | -      | 1           |
        | 1     | 3   | 1101       | 1101 | reject   | jitter | -           |
        | 1     | 4   | 1101       | 1101 | throttle | -      | 1.001       |
        | 1     | 5   | 1101       | 1101 | admit    | -      | 0.001       |
      And the stream statistics are:
        | batch | stream | admitted | rejected_jitter | throttled | tokens |
        | 0     | s      | 3        | 0               | 2         | 2      |
        | 1     | s      | 6        | 1               | 4         | 0.001  |
      And the progress is:
        | batch | admitted | rejected | shed | throttled | load_score |
        | 0     | 1        | 0        | 0    | 2         | 900        |
        | 1     | 2        | 1        | 0    | 4         | 900        |

      Examples:
        | restarts or keeps running    |
        | restarts from its checkpoint |
        | keeps running                |

  Rule: The object API (oracle-only)

    @oracle-only @OXS-R2 @OXS-R3 @TR-10
    Scenario Outline: StreamSlaConfig refuses a bad setting with InvalidConfig naming it
      NaN and the infinities cannot be written in a trace (its JSON has no such numbers),
      and the message is the object API's: a stream answers a bad configuration with
      InvalidConfig alone (the stream scenarios above).
      When a StreamSlaConfig is built from:
        | setting   | value   |
        | class     | Gold    |
        | <setting> | <value> |
      Then it is refused with InvalidConfig naming <setting>

      Examples:
        | setting            | value     |
        | max_events_per_sec | NaN       |
        | max_events_per_sec | Infinity  |
        | max_events_per_sec | -Infinity |
        | token_cost         | NaN       |
        | token_cost         | Infinity  |
        | max_events_per_sec | 0.0005    |
        | token_cost         | 51        |
        | max_lag            | -1        |
        | jitter_budget_ms   | 1.5       |
        | rate               | 5         |

    @oracle-only @OXS-R2 @OXS-R7 @OXS-R8 @TR-10
    Scenario: Registering a stream again replaces its agreement and starts it afresh
      A trace registers its streams once, before its first item (OXS-R14); registering again
      is a call of the controller's API with no stream of its own (TR-10). Had the stream
      kept its state, the jitter gap of 5000 ms would reject the third event and the Bronze
      bucket would hold 5 tokens at most.
      Given a StreamAdmissionController
      And stream s is registered with:
        | setting          | value  |
        | class            | Bronze |
        | token_cost       | 5      |
        | jitter_budget_ms | 1000   |
      When the controller is asked to admit these events:
        | stream | event_ts | now |
        | s      | 0        | 0   |
        | s      | 0        | 500 |
      And stream s is registered again with:
        | setting          | value |
        | class            | Gold  |
        | jitter_budget_ms | 1000  |
      And the controller is asked to admit these events:
        | stream | event_ts | now  |
        | s      | 5000     | 5000 |
        | s      | 5000     | 5000 |
      Then the controller's answers are:
        | stream | event_ts | now  | answer      | check | tokens_left | lag |
        | s      | 0        | 0    | Admit       | -     | 0           | 0   |
        | s      | 0        | 500  | SlaExceeded | rate  | -           | 500 |
        | s      | 5000     | 5000 | Admit       | -     | 49          | 0   |
        | s      | 5000     | 5000 | Admit       | -     | 48          | 0   |
      And the statistics of stream s are:
        | admitted | rejected_lag | rejected_jitter | rejected_rate | shed | throttled |
        | 2        | 0            | 0               | 0             | 0    | 0         |

    @oracle-only @OXS-R9 @TR-10
    Scenario: try_admit raises SlaExceeded naming the check, and UnregisteredStream, which changes nothing
      The exceptions and their messages are the object API; a stream sees only the decision
      and reason columns (TR-10).
      Given a StreamAdmissionController
      And stream g is registered with:
        | setting | value |
        | class   | Gold  |
      When the controller is asked to admit these events:
        | stream | event_ts | now  |
        | g      | 300      | 1000 |
        | nobody | 1000     | 1000 |
        | g      | 1000     | 1000 |
      Then the controller's answers are:
        | stream | event_ts | now  | answer             | check | tokens_left | lag |
        | g      | 300      | 1000 | SlaExceeded        | lag   | -           | 700 |
        | nobody | 1000     | 1000 | UnregisteredStream | -     | -           | -   |
        | g      | 1000     | 1000 | Admit              | -     | 49          | 0   |
      And answer 0 says "lag 700 ms exceeds max_lag 500 ms"
      And the statistics of stream g are:
        | admitted | rejected_lag | rejected_jitter | rejected_rate |
        | 1        | 1            | 0               | 0             |
      And the controller's streams are g
