@F017E
Feature: Session windows closed by the watermark, with timers that survive restarts
  Events of one key that follow each other within an inactivity gap form a
  session [first event, last event + gap). A session closes, and is emitted
  once, when the watermark (greatest event time seen minus the delay) is
  strictly past its end plus the allowed lateness. Every open session has one
  pending timer; timers must survive restarts so that no session stays open
  and none is emitted twice. When the input is complete, an end item moves the
  watermark to the end of time and closes every open session by its timer.
  Clauses: spec/session_windows.md.

  Times are milliseconds. Batches are numbered from 0: each When step that
  adds items is one new batch (see harness/steps.py). "-" in an expected table
  is null. The reason of a session says what closed it: its own key's event
  moving the watermark ("watermark"), or its timer ("timer").

  Rule: Sessions and their bounds

    @F017E-R2 @F017E-R4 @F017E-R7 @F017E-R8 @F017E-R11 @F017E-R21 @TR-8
    Scenario: The seed's end-to-end example: a session closes when an event moves the watermark past it
      Two events 500 ms apart form one session [0, 1500); nothing is emitted until the
      event at 3000 moves the watermark (delay 0) past 1500.
      Given session windows configured with:
        | setting | value |
        | gap     | 1000  |
      When these events arrive in one batch:
        | key  | event_time | value |
        | user | 0          | 10    |
        | user | 500        | 20    |
      Then the sessions table is empty
      And the timers table is:
        | batch | key  | session_start | trigger_time |
        | 0     | user | 0             | 1500         |
      When these events arrive in the next batch:
        | key  | event_time | value |
        | user | 3000       | 100   |
      Then the sessions table is:
        | batch | key  | session_start | session_end | count | sum | reason    |
        | 1     | user | 0             | 1500        | 2     | 30  | watermark |
      And the progress table is:
        | batch | watermark | open_sessions | sessions_closed_by_timer | sessions_closed_by_watermark | late_events |
        | 0     | 500       | 1             | 0                        | 0                            | 0           |
        | 1     | 3000      | 1             | 0                        | 1                            | 0           |

    @F017E-R3 @F017E-R2
    Scenario: An event exactly one gap after the last one joins the session, one more starts a new one
      Given session windows configured with:
        | setting       | value |
        | gap           | 1000  |
        | bounded_delay | 5000  |
      When these events arrive in one batch:
        | key | event_time |
        | a   | 0          |
        | a   | 1000       |
        | a   | 2001       |
      Then the timers table is:
        | batch | key | session_start | trigger_time |
        | 0     | a   | 0             | 2000         |
        | 0     | a   | 2001          | 3001         |
      When these events arrive in the next batch:
        | key | event_time |
        | z   | 10000      |
      Then the sessions table is:
        | batch | key | session_start | session_end | count | reason |
        | 1     | a   | 0             | 2000        | 2     | timer  |
        | 1     | a   | 2001          | 3001        | 1     | timer  |

    @F017E-R3 @F017E-R4 @F017E-R12 @F017E-R13
    Scenario: An event that bridges two sessions merges them, and the absorbed timers never fire
      The sessions [0, 1000) and [2000, 3000) are bridged by the event at 1000, which
      touches both. The merged session's timer is at 3000; the watermark passing the old
      timer at 1000 closes nothing.
      Given session windows configured with:
        | setting       | value |
        | gap           | 1000  |
        | bounded_delay | 5000  |
      When these events arrive in one batch:
        | key | event_time | value |
        | a   | 0          | 1     |
        | a   | 2000       | 2     |
      Then the timers table is:
        | batch | key | session_start | trigger_time |
        | 0     | a   | 0             | 1000         |
        | 0     | a   | 2000          | 3000         |
      When these events arrive in the next batch:
        | key | event_time | value |
        | a   | 1000       | 4     |
      Then the timers table is:
        | batch | key | session_start | trigger_time |
        | 0     | a   | 0             | 1000         |
        | 0     | a   | 2000          | 3000         |
        | 1     | a   | 0             | 3000         |
      When these events arrive in the next batch:
        | key | event_time |
        | b   | 6500       |
      Then the sessions table is empty
      When these events arrive in the next batch:
        | key | event_time |
        | b   | 8001       |
      Then the sessions table is:
        | batch | key | session_start | session_end | count | sum | reason |
        | 3     | a   | 0             | 3000        | 3     | 7   | timer  |

    @F017E-R1 @F017E-R4
    Scenario: Sessions of different keys never meet, and count and sum are per session
      Given session windows configured with:
        | setting | value |
        | gap     | 1000  |
      When these events arrive in one batch:
        | key | event_time | value |
        | a   | 0          | 5     |
        | b   | 200        | -7    |
        | a   | 400        | 6     |
        | b   | 900        | -1    |
      And these events arrive in the next batch:
        | key | event_time |
        | c   | 5000       |
      Then the sessions table is:
        | batch | key | session_start | session_end | count | sum | reason |
        | 1     | a   | 0             | 1400        | 2     | 11  | timer  |
        | 1     | b   | 200           | 1900        | 2     | -8  | timer  |

    @F017E-R2 @F017E-R7 @F017E-R12 @TR-2
    Scenario: A session end near the upper bound of time saturates and that session never closes
      Given session windows configured with:
        | setting          | value |
        | gap              | 1000  |
        | allowed_lateness | 5     |
      When these events arrive in one batch:
        | key | event_time  |
        | a   | I64_MAX - 10 |
        | b   | I64_MAX     |
      Then the timers table is:
        | batch | key | session_start | trigger_time |
        | 0     | a   | I64_MAX - 10  | I64_MAX      |
        | 0     | b   | I64_MAX       | I64_MAX      |
      And the sessions table is empty
      And the progress table is:
        | batch | watermark | open_sessions |
        | 0     | I64_MAX   | 2             |

  Rule: The watermark

    @F017E-R5 @F017E-R6 @F017E-R8 @F017E-R14
    Scenario: One watermark per stream, moved event by event: another key's event closes a session in the same batch
      Given session windows configured with:
        | setting | value |
        | gap     | 1000  |
      When these events arrive in one batch:
        | key | event_time |
        | a   | 0          |
        | b   | 5000       |
      Then the sessions table is:
        | batch | key | session_start | session_end | count | reason |
        | 0     | a   | 0             | 1000        | 1     | timer  |
      And the timers table is:
        | batch | key | session_start | trigger_time |
        | 0     | b   | 5000          | 6000         |

    @F017E-R6 @F017E-R8 @F017E-R10 @F017E-R22
    Scenario: The watermark moves before the next event of the batch is judged, not at the end of the batch
      Judged at the end of the batch, the three events would form one session [0, 1100).
      Event by event, the one at 5000 moves the watermark past [0, 1000), which closes by the
      watermark of its own key, and the event at 100 comes too late.
      Given session windows configured with:
        | setting | value |
        | gap     | 1000  |
      When these events arrive in one batch:
        | key | event_time |
        | a   | 0          |
        | a   | 5000       |
        | a   | 100        |
      Then the sessions table is:
        | batch | key | session_start | session_end | count | reason    |
        | 0     | a   | 0             | 1000        | 1     | watermark |
      And the late table is:
        | batch | seq | key | event_time | watermark | verdict     |
        | 0     | 2   | a   | 100        | 5000      | late_output |

    @F017E-R5
    Scenario: No watermark before the first event; it is the greatest event time minus the delay and never goes down
      Given session windows configured with:
        | setting       | value |
        | gap           | 100   |
        | bounded_delay | 2000  |
      When an empty batch passes
      And these events arrive in the next batch:
        | key | event_time |
        | a   | 10000      |
        | a   | 9000       |
      And these events arrive in the next batch:
        | key | event_time |
        | a   | 8500       |
      Then the progress table is:
        | batch | watermark | open_sessions | late_events |
        | 0     | -         | 0             | 0           |
        | 1     | 8000      | 2             | 0           |
        | 2     | 8000      | 3             | 0           |
      And the late table is empty

  Rule: Closing

    @F017E-R7 @F017E-R12
    Scenario: A watermark equal to end plus lateness does not close the session, one more millisecond does
      Given session windows configured with:
        | setting          | value |
        | gap              | 1000  |
        | allowed_lateness | 500   |
      When these events arrive in one batch:
        | key | event_time |
        | a   | 0          |
      And these events arrive in the next batch:
        | key | event_time |
        | b   | 1500       |
      Then the sessions table is empty
      When these events arrive in the next batch:
        | key | event_time |
        | b   | 1501       |
      Then the sessions table is:
        | batch | key | session_start | session_end | count | reason |
        | 2     | a   | 0             | 1000        | 1     | timer  |

    @F017E-R8 @F017E-R9
    Scenario: One event closes its own key's session by the watermark and another key's by its timer
      Given session windows configured with:
        | setting | value |
        | gap     | 1000  |
      When these events arrive in one batch:
        | key | event_time |
        | a   | 0          |
        | b   | 10         |
      And these events arrive in the next batch:
        | key | event_time |
        | a   | 5000       |
      Then the sessions table is:
        | batch | key | session_start | session_end | count | reason    |
        | 1     | a   | 0             | 1000        | 1     | watermark |
        | 1     | b   | 10            | 1010        | 1     | timer     |
      And the progress table is:
        | batch | sessions_closed_by_timer | sessions_closed_by_watermark |
        | 0     | 0                        | 0                            |
        | 1     | 1                        | 1                            |

    @F017E-R14 @F017E-R7
    Scenario: A key that stops sending still has its session closed once other keys move the watermark
      The whole stream going quiet closes nothing (no processing-time fallback); the first
      event of another key that moves the watermark past the session closes it by its timer.
      Given session windows configured with:
        | setting | value |
        | gap     | 1000  |
      When these events arrive in one batch:
        | key    | event_time | value |
        | silent | 0          | 3     |
      And 3 empty batches pass
      Then the sessions table is empty
      When these events arrive in the next batch:
        | key   | event_time |
        | other | 800        |
      Then the sessions table is empty
      When these events arrive in the next batch:
        | key   | event_time |
        | other | 9000       |
      Then the sessions table is:
        | batch | key    | session_start | session_end | count | sum | reason    |
        | 5     | silent | 0             | 1000        | 1     | 3   | timer     |
        | 5     | other  | 800           | 1800        | 1     | 0   | watermark |

  Rule: Late events

    @F017E-R10
    Scenario: An event is late when its time plus the lateness is below the watermark, even inside an open session
      The event at 3000 is exactly at the watermark (on time) and starts a session; the
      event at 2999 would touch that open session but is older than the watermark: late.
      Given session windows configured with:
        | setting       | value |
        | gap           | 1000  |
        | bounded_delay | 2000  |
      When these events arrive in one batch:
        | key | event_time |
        | a   | 5000       |
        | a   | 3000       |
        | a   | 2999       |
      Then the late table is:
        | batch | seq | key | event_time | watermark | verdict     |
        | 0     | 2   | a   | 2999       | 3000      | late_output |
      And the timers table is:
        | batch | key | session_start | trigger_time |
        | 0     | a   | 3000          | 4000         |
        | 0     | a   | 5000          | 6000         |

    @F017E-R10 @F017E-R11 @F017E-R7
    Scenario: An event for an already closed session goes to the late output and the session is not emitted again
      Given session windows configured with:
        | setting | value |
        | gap     | 1000  |
      When these events arrive in one batch:
        | key | event_time | value |
        | a   | 0          | 10    |
        | a   | 500        | 20    |
      And these events arrive in the next batch:
        | key | event_time |
        | b   | 3000       |
      And these events arrive in the next batch:
        | key | event_time | value |
        | a   | 1200       | 5     |
      Then the sessions table is:
        | batch | key | session_start | session_end | count | sum | reason |
        | 1     | a   | 0             | 1500        | 2     | 30  | timer  |
      And the late table is:
        | batch | seq | key | event_time | watermark | verdict     |
        | 2     | 0   | a   | 1200       | 3000      | late_output |
      And the timers table is:
        | batch | key | session_start | trigger_time |
        | 0     | a   | 0             | 1500         |
        | 1     | b   | 3000          | 4000         |
        | 2     | b   | 3000          | 4000         |

    @F017E-R11 @F017E-R10
    Scenario: Under Final the same sessions are emitted and a late event is dropped
      Given session windows configured with:
        | setting       | value   |
        | gap           | 1000    |
        | emit_strategy | "Final" |
      When these events arrive in one batch:
        | key | event_time | value |
        | a   | 0          | 10    |
        | a   | 500        | 20    |
      And these events arrive in the next batch:
        | key | event_time |
        | b   | 3000       |
      And these events arrive in the next batch:
        | key | event_time | value |
        | a   | 1200       | 5     |
      Then the sessions table is:
        | batch | key | session_start | session_end | count | sum | reason |
        | 1     | a   | 0             | 1500        | 2     | 30  | timer  |
      And the late table is:
        | batch | seq | key | event_time | watermark | verdict |
        | 2     | 0   | a   | 1200       | 3000      | dropped |
      And the progress table is:
        | batch | late_events |
        | 0     | 0           |
        | 1     | 0           |
        | 2     | 1           |

  Rule: Timers

    @F017E-R12 @F017E-R13
    Scenario: A timer moves when its session grows, and the watermark passing the old time closes nothing
      The event at 300 joins without moving the end, so the timer stays at 1800.
      Given session windows configured with:
        | setting       | value |
        | gap           | 1000  |
        | bounded_delay | 1000  |
      When these events arrive in one batch:
        | key | event_time |
        | a   | 0          |
        | a   | 800        |
        | a   | 300        |
      Then the timers table is:
        | batch | key | session_start | trigger_time |
        | 0     | a   | 0             | 1800         |
      When these events arrive in the next batch:
        | key | event_time |
        | b   | 2500       |
      Then the sessions table is empty
      When these events arrive in the next batch:
        | key | event_time |
        | b   | 2801       |
      Then the sessions table is:
        | batch | key | session_start | session_end | count | reason |
        | 2     | a   | 0             | 1800        | 3     | timer  |

    @oracle-only @F017E-R13 @TR-10
    Scenario: The timer service keeps abandoned timers, and a stale timer closes nothing
      Calling on_timer by hand and listing the timer service are object-API calls (TR-10);
      in a stream, stale timers are only seen as sessions that do not close early
      (the scenarios above).
      Given a SessionWindowOperator with a gap of 1000 ms and a watermark delay of 0 ms
      When the operator processes an event of key a at 0 ms
      And the operator processes an event of key a at 800 ms
      Then the registered timers are:
        | time | key | session_id |
        | 1000 | a   | 1          |
        | 1800 | a   | 1          |
      And the pending timers are:
        | key | session_id | time |
        | a   | 1          | 1800 |
      When the operator is given the timer at 1000 ms of key a and session 1
      Then the operator emitted nothing
      When the operator is given a timer at 1800 ms with a foreign timer key
      Then the operator emitted nothing
      When the operator is given the timer at 1800 ms of key a and session 1
      Then the operator emitted:
        | key | session_start | session_end | count | sum | reason |
        | a   | 0             | 1800        | 2     | 0   | timer  |
      And the pending timers are:
        | key | session_id | time |

  Rule: Checkpoint and restore

    @F017E-R15 @F017E-R16 @F017E-R17 @F017E-R14 @F017E-R21 @TR-5
    Scenario: A timer survives a restart and closes its session for a key that gets no more events
      Given session windows configured with:
        | setting | value |
        | gap     | 1000  |
      When these events arrive in one batch:
        | key | event_time | value |
        | a   | 0          | 10    |
        | a   | 500        | 20    |
      And the engine restarts from its checkpoint
      And these events arrive in the next batch:
        | key | event_time |
        | b   | 3000       |
      Then the sessions table is:
        | batch | key | session_start | session_end | count | sum | reason |
        | 1     | a   | 0             | 1500        | 2     | 30  | timer  |
      And the timers table is:
        | batch | key | session_start | trigger_time |
        | 0     | a   | 0             | 1500         |
        | 1     | b   | 3000          | 4000         |

    @F017E-R15 @F017E-R9 @F017E-R5 @F017E-R17
    Scenario: The watermark and the counters survive a restart
      Given session windows configured with:
        | setting | value |
        | gap     | 1000  |
      When these events arrive in one batch:
        | key | event_time |
        | a   | 0          |
        | a   | 5000       |
        | a   | 10         |
      And the engine restarts from its checkpoint
      And these events arrive in the next batch:
        | key | event_time |
        | b   | 4000       |
      Then the late table is:
        | batch | seq | key | event_time | watermark | verdict     |
        | 0     | 2   | a   | 10         | 5000      | late_output |
        | 1     | 0   | b   | 4000       | 5000      | late_output |
      And the progress table is:
        | batch | watermark | open_sessions | sessions_closed_by_timer | sessions_closed_by_watermark | late_events |
        | 0     | 5000      | 1             | 0                        | 1                            | 1           |
        | 1     | 5000      | 1             | 0                        | 1                            | 2           |

    @F017E-R17 @F017E-R12 @TR-5
    Scenario Outline: Restarting after any batch changes nothing (<restart>)
      Timers move in batch 1 (the sessions of a and b grow); after a restart only the
      moved timers exist, and the old times close nothing.
      Given session windows configured with:
        | setting          | value |
        | gap              | 1000  |
        | bounded_delay    | 2000  |
        | allowed_lateness | 200   |
      When these events arrive in one batch:
        | key | event_time | value |
        | a   | 0          | 1     |
        | b   | 100        | 2     |
        | a   | 2500       | 3     |
      And the engine <restart>
      And these events arrive in the next batch:
        | key | event_time | value |
        | a   | 1000       | 4     |
        | b   | 1100       | 5     |
        | c   | 4000       | 6     |
      And the engine <restart>
      And an empty batch passes
      And the engine <restart>
      And these events arrive in the next batch:
        | key | event_time | value |
        | c   | 9000       | 7     |
        | a   | 2000       | 8     |
      Then the sessions table is:
        | batch | key | session_start | session_end | count | sum | reason    |
        | 3     | a   | 0             | 2000        | 2     | 5   | timer     |
        | 3     | a   | 2500          | 3500        | 1     | 3   | timer     |
        | 3     | b   | 100           | 2100        | 2     | 7   | timer     |
        | 3     | c   | 4000          | 5000        | 1     | 6   | watermark |
      And the late table is:
        | batch | seq | key | event_time | watermark | verdict     |
        | 3     | 1   | a   | 2000       | 7000      | late_output |
      And the timers table is:
        | batch | key | session_start | trigger_time |
        | 0     | a   | 0             | 1200         |
        | 0     | a   | 2500          | 3700         |
        | 0     | b   | 100           | 1300         |
        | 1     | a   | 0             | 2200         |
        | 1     | a   | 2500          | 3700         |
        | 1     | b   | 100           | 2300         |
        | 1     | c   | 4000          | 5200         |
        | 2     | a   | 0             | 2200         |
        | 2     | a   | 2500          | 3700         |
        | 2     | b   | 100           | 2300         |
        | 2     | c   | 4000          | 5200         |
        | 3     | c   | 9000          | 10200        |

      Examples:
        | restart                      |
        | keeps running                |
        | restarts from its checkpoint |

    @F017E-R24 @F017E-R7 @F017E-R8 @F017E-R12 @F017E-R17 @TR-5
    Scenario: The same items cut into other batches close the same sessions in the batch of the same event
      The items of the restart outline above, cut after a at 0 and b at 100, after c at 4000
      and after c at 9000, with no empty batch and with restarts after batches 0 and 2. Event by
      event nothing changes: a at 2500 (watermark 500) opens [2500, 3500), a at 1000 and b at
      1100 still grow [0, 2000) and [100, 2100), and c at 4000 (watermark 2000) opens
      [4000, 5000). c at 9000 (watermark 7000) still closes its own key's session by the
      watermark and the timers 2200, 2300 and 3700 of a, b and a by their timers; it is now the
      only item of batch 2, so the four sessions are emitted in batch 2 instead of 3. a at 2000
      is still late against 7000, now as seq 0 of batch 3 (item 7 of the trace, as seq 1 was).
      Batch 1 ends after the same six items as batches 1 and 2 of the outline, so its timers
      and progress equal theirs; batch 3 ends after all eight items and equals the outline's
      batch 3. Batches 0 and 2 end where the outline has no batch end: their rows are new.
      Given session windows configured with:
        | setting          | value |
        | gap              | 1000  |
        | bounded_delay    | 2000  |
        | allowed_lateness | 200   |
      When these events arrive in one batch:
        | key | event_time | value |
        | a   | 0          | 1     |
        | b   | 100        | 2     |
      And the engine restarts from its checkpoint
      And these events arrive in the next batch:
        | key | event_time | value |
        | a   | 2500       | 3     |
        | a   | 1000       | 4     |
        | b   | 1100       | 5     |
        | c   | 4000       | 6     |
      And these events arrive in the next batch:
        | key | event_time | value |
        | c   | 9000       | 7     |
      And the engine restarts from its checkpoint
      And these events arrive in the next batch:
        | key | event_time | value |
        | a   | 2000       | 8     |
      Then the sessions table is:
        | batch | key | session_start | session_end | count | sum | reason    |
        | 2     | a   | 0             | 2000        | 2     | 5   | timer     |
        | 2     | a   | 2500          | 3500        | 1     | 3   | timer     |
        | 2     | b   | 100           | 2100        | 2     | 7   | timer     |
        | 2     | c   | 4000          | 5000        | 1     | 6   | watermark |
      And the late table is:
        | batch | seq | key | event_time | watermark | verdict     |
        | 3     | 0   | a   | 2000       | 7000      | late_output |
      And the timers table is:
        | batch | key | session_start | trigger_time |
        | 0     | a   | 0             | 1200         |
        | 0     | b   | 100           | 1300         |
        | 1     | a   | 0             | 2200         |
        | 1     | a   | 2500          | 3700         |
        | 1     | b   | 100           | 2300         |
        | 1     | c   | 4000          | 5200         |
        | 2     | c   | 9000          | 10200        |
        | 3     | c   | 9000          | 10200        |
      And the progress table is:
        | batch | watermark | open_sessions | sessions_closed_by_timer | sessions_closed_by_watermark | late_events |
        | 0     | -1900     | 2             | 0                        | 0                            | 0           |
        | 1     | 2000      | 4             | 0                        | 0                            | 0           |
        | 2     | 7000      | 1             | 3                        | 1                            | 0           |
        | 3     | 7000      | 1             | 3                        | 1                            | 1           |

    @oracle-only @F017E-R16 @F017E-R15 @F017E-R13 @TR-10
    Scenario: Restore re-registers every pending timer in a new timer service, once
      The seed's unit test: one event at 500 with a watermark delay of 100 ms, a checkpoint,
      a new operator restoring it. Listing a timer service is an object-API call (TR-10).
      Given a SessionWindowOperator with a gap of 1000 ms and a watermark delay of 100 ms
      When the operator processes an event of key k at 500 ms
      And the operator processes an event of key j at 520 ms
      And the operator is checkpointed
      And a new operator restores the checkpoint into a new timer service
      Then the registered timers are:
        | time | key | session_id |
        | 1500 | k   | 1          |
        | 1520 | j   | 2          |
      When a new operator restores the checkpoint into the same timer service
      Then the registered timers are:
        | time | key | session_id |
        | 1500 | k   | 1          |
        | 1520 | j   | 2          |
      When the operator processes an event of key x at 1605 ms
      Then the operator emitted:
        | key | session_start | session_end | count | sum | reason |
        | k   | 500           | 1500        | 1     | 0   | timer  |
      And restoring the checkpoint into an operator with another id is refused

  Rule: Configuration, tables and malformed items

    @F017E-R18 @TR-6
    Scenario Outline: A bad configuration is refused before any item (<setting>)
      Given session windows configured with:
        | setting   | value   |
        | <setting> | <value> |
      When these events arrive in one batch:
        | key | event_time |
        | a   | 0          |
      Then the configuration is rejected

      Examples:
        | setting          | value      |
        | bounded_delay    | 0          |
        | gap              | 0          |
        | gap              | -5         |
        | gap              | "1000"     |

    @F017E-R18 @TR-6
    Scenario Outline: A bad lateness, delay or strategy is refused (<setting> = <value>)
      Given session windows configured with:
        | setting   | value   |
        | gap       | 1000    |
        | <setting> | <value> |
      When these events arrive in one batch:
        | key | event_time |
        | a   | 0          |
      Then the configuration is rejected

      Examples:
        | setting          | value      |
        | allowed_lateness | -1         |
        | bounded_delay    | -1         |
        | emit_strategy    | "OnUpdate" |
        | emit_strategy    | 3          |
        | window_size      | 1000       |

    @F017E-R18 @F017E-R19
    Scenario: Defaults: no delay, no lateness, OnWindowClose; every batch has a progress row
      Given session windows configured with:
        | setting | value |
        | gap     | 10    |
      When these events arrive in one batch:
        | key | event_time |
        | a   | 100        |
      And an empty batch passes
      And these events arrive in the next batch:
        | key | event_time |
        | a   | 111        |
        | a   | 99         |
      Then the sessions table is:
        | batch | key | session_start | session_end | count | reason    |
        | 2     | a   | 100           | 110         | 1     | watermark |
      And the late table is:
        | batch | seq | key | event_time | watermark | verdict     |
        | 2     | 1   | a   | 99         | 111       | late_output |
      And the progress table is:
        | batch | watermark | open_sessions | sessions_closed_by_timer | sessions_closed_by_watermark | late_events |
        | 0     | 100       | 1             | 0                        | 0                            | 0           |
        | 1     | 100       | 1             | 0                        | 0                            | 0           |
        | 2     | 111       | 1             | 0                        | 1                            | 1           |

    @F017E-R20 @TR-7
    Scenario: Malformed items are error rows and change nothing, not even the watermark
      Given session windows configured with:
        | setting | value |
        | gap     | 1000  |
      When these items arrive in one batch:
        | kind       | key | event_time | time |
        | event      | a   | 0          |      |
        | event      |     | 9000       |      |
        | event      | a   |            |      |
        | clock      |     |            | 50   |
        | remove_key | a   |            |      |
        | event      | a   | 700        |      |
      Then the errors are:
        | batch | seq | reason             |
        | 0     | 1   | missing_key        |
        | 0     | 2   | missing_event_time |
        | 0     | 3   | unsupported_item   |
        | 0     | 4   | unsupported_item   |
      And the progress table is:
        | batch | watermark | open_sessions |
        | 0     | 700       | 1             |
      And the timers table is:
        | batch | key | session_start | trigger_time |
        | 0     | a   | 0             | 1700         |

    @TR-15 @F017E-R20 @F017E-R23
    Scenario: Every row of a repeated seq is a duplicate_seq error row, even an end
      The table's rows at seq 1 were an end and an event: neither can be placed before the
      other, so both are error rows, the stream has not ended and its session stays open.
      Given session windows configured with:
        | setting | value |
        | gap     | 1000  |
      When these items arrive in one batch:
        | kind          | key | event_time |
        | event         | a   | 0          |
        | duplicate_seq |     |            |
        | duplicate_seq |     |            |
        | event         | a   | 700        |
      Then the errors are:
        | batch | seq | reason        |
        | 0     | 1   | duplicate_seq |
        | 0     | 2   | duplicate_seq |
      And the progress table is:
        | batch | watermark | open_sessions |
        | 0     | 700       | 1             |
      And the timers table is:
        | batch | key | session_start | trigger_time |
        | 0     | a   | 0             | 1700         |

    @F017E-R22 @F017E-R3 @F017E-R8 @F017E-R10
    Scenario: In one batch, sessions grow, merge, close by timer and by watermark, and events come late
      Given session windows configured with:
        | setting          | value |
        | gap              | 100   |
        | bounded_delay    | 150   |
        | allowed_lateness | 20    |
      When these events arrive in one batch:
        | key | event_time | value |
        | a   | 1000       | 1     |
        | b   | 1050       | 2     |
        | a   | 1200       | 3     |
        | a   | 1100       | 4     |
        | b   | 1400       | 5     |
        | c   | 1480       | 6     |
        | b   | 1250       | 7     |
        | a   | 1500       | 8     |
        | c   | 1290       | 9     |
        | c   | 1700       | 10    |
      Then the sessions table is:
        | batch | key | session_start | session_end | count | sum | reason    |
        | 0     | b   | 1050          | 1150        | 1     | 2   | watermark |
        | 0     | a   | 1000          | 1300        | 3     | 8   | timer     |
        | 0     | b   | 1400          | 1500        | 1     | 5   | timer     |
      And the late table is:
        | batch | seq | key | event_time | watermark | verdict     |
        | 0     | 6   | b   | 1250       | 1330      | late_output |
        | 0     | 8   | c   | 1290       | 1350      | late_output |
      And the timers table is:
        | batch | key | session_start | trigger_time |
        | 0     | a   | 1500          | 1620         |
        | 0     | c   | 1480          | 1600         |
        | 0     | c   | 1700          | 1820         |
      And the progress table is:
        | batch | watermark | open_sessions | sessions_closed_by_timer | sessions_closed_by_watermark | late_events |
        | 0     | 1550      | 3             | 2                        | 1                            | 2           |

  Rule: The end of the stream

    @F017E-R23 @F017E-R8 @F017E-R9 @F017E-R14 @F017E-R20 @F017E-R17 @TR-14 @TR-5
    Scenario Outline: The end closes every open session by its timer, and later items are after_end
      With a delay of 5000 no event passes a session. The end moves the watermark to the
      end of time: b's session closes although b has no event in that batch, and c's
      closes by its timer although c's event came just before the end.
      Given session windows configured with:
        | setting       | value |
        | gap           | 1000  |
        | bounded_delay | 5000  |
      When these events arrive in one batch:
        | key | event_time | value |
        | a   | 0          | 1     |
        | a   | 500        | 2     |
        | b   | 300        | 4     |
      When the engine <restarts>
      When these items arrive in the next batch:
        | kind  | key | event_time | value |
        | event | c   | 2000       | 8     |
        | end   |     |            |       |
        | event | a   | 600        | 16    |
      When the engine <restarts>
      When these events arrive in the next batch:
        | key | event_time |
        | d   | 9000       |
      Then the sessions table is:
        | batch | key | session_start | session_end | count | sum | reason |
        | 1     | a   | 0             | 1500        | 2     | 3   | timer  |
        | 1     | b   | 300           | 1300        | 1     | 4   | timer  |
        | 1     | c   | 2000          | 3000        | 1     | 8   | timer  |
      And the timers table is:
        | batch | key | session_start | trigger_time |
        | 0     | a   | 0             | 1500         |
        | 0     | b   | 300           | 1300         |
      And the errors are:
        | batch | seq | reason    |
        | 1     | 2   | after_end |
        | 2     | 0   | after_end |
      And the late table is empty
      And the progress table is:
        | batch | watermark | open_sessions | sessions_closed_by_timer | sessions_closed_by_watermark | late_events |
        | 0     | -4500     | 2             | 0                        | 0                            | 0           |
        | 1     | I64_MAX   | 0             | 3                        | 0                            | 0           |
        | 2     | I64_MAX   | 0             | 3                        | 0                            | 0           |

      Examples:
        | restarts                     |
        | restarts from its checkpoint |
        | keeps running                |

    @F017E-R23 @F017E-R7 @F017E-R12 @TR-2 @TR-14
    Scenario: At the end a session whose end plus lateness saturates at I64_MAX stays open
      a's session ends at I64_MAX - 10 + 1000, cut to I64_MAX, so its timer is I64_MAX and
      no watermark is strictly past it. The delay keeps the watermark at -10 until the end.
      Given session windows configured with:
        | setting          | value   |
        | gap              | 1000    |
        | allowed_lateness | 5       |
        | bounded_delay    | I64_MAX |
      When these events arrive in one batch:
        | key | event_time   | value |
        | a   | I64_MAX - 10 | 1     |
        | b   | 0            | 2     |
      And the input ends in the same batch
      Then the sessions table is:
        | batch | key | session_start | session_end | count | sum | reason |
        | 0     | b   | 0             | 1000        | 1     | 2   | timer  |
      And the timers table is:
        | batch | key | session_start | trigger_time |
        | 0     | a   | I64_MAX - 10  | I64_MAX      |
      And the progress table is:
        | batch | watermark | open_sessions | sessions_closed_by_timer | sessions_closed_by_watermark |
        | 0     | I64_MAX   | 1             | 1                        | 0                            |
