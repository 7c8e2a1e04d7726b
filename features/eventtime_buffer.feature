@VELO
Feature: Event-time reorder buffer
  Tuples arrive out of order; the watermark stage holds them in a buffer,
  lets them out in event-time order and, after each release, emits a
  watermark that never goes back. A tuple at or below the current watermark
  comes too late to be put in order: it is dropped and counted. An end item
  (the input is complete) releases everything still buffered. Clauses:
  spec/eventtime_buffer.md.

  Times are milliseconds. Batches are numbered from 0; each batch is one
  collection. An event's `raw` cell is JSON (`1500`, `"1500"`, `1.5`, `null`);
  an empty cell is a null cell. "The output stream" lists the emitted items
  in the output's order, which the rows carry as a sort key (VELO-R17): by
  batch; in a batch the error items first, by arrival; then tuples and
  watermarks by time, a watermark after the tuples of its time, tuples of one
  time by arrival (`arrival_batch`, `arrival_seq`: the batch and seq of the
  tuple's event). "-" is null.

  Rule: Ordering and watermarks

    @VELO-R10 @VELO-R15 @VELO-R16 @VELO-R17 @VELO-R18 @TR-1 @TR-8 @TR-9
    Scenario: Out-of-order tuples leave in event-time order, then the watermark
      The maximum is 1500 and the tolerance 500, so the target is 1000: the
      tuples at or below it leave sorted, the others wait in the buffer.
      Given an event-time watermark stage reading column ts as unixtimestamp_ms with a late tolerance of 500 ms
      When these events arrive in one batch:
        | key | raw  | value |
        | a   | 1000 | 1     |
        | b   | 700  | 2     |
        | c   | 1500 | 3     |
        | d   | 900  | 4     |
        | e   | 1200 | 5     |
      Then the output stream is:
        | batch | kind      | key | event_time | value | watermark | arrival_batch | arrival_seq |
        | 0     | tuple     | b   | 700        | 2     | -         | 0             | 1           |
        | 0     | tuple     | d   | 900        | 4     | -         | 0             | 3           |
        | 0     | tuple     | a   | 1000       | 1     | -         | 0             | 0           |
        | 0     | watermark | -   | -          | -     | 1000      | -             | -           |
      And the progress table is:
        | batch | watermark | max_timestamp_seen | buffer_size | late_dropped_count | watermark_emitted_count |
        | 0     | 1000      | 1500               | 2           | 0                  | 1                       |
      When these events arrive in the next batch:
        | key | raw  | value |
        | f   | 2100 | 6     |
      Then the output stream in the last batch is:
        | kind      | key | event_time | watermark | arrival_batch | arrival_seq |
        | tuple     | e   | 1200       | -         | 0             | 4           |
        | tuple     | c   | 1500       | -         | 0             | 2           |
        | watermark | -   | -          | 1600      | -             | -           |
      And the late table is empty
      And there are no errors

    @VELO-R14 @VELO-R18 @VELO-R19
    Scenario: A tuple at or below the current watermark is dropped and counted
      After the first batch the watermark is 1000. 1000 itself is late (the
      test is <=), 1001 is on time although it is older than the buffered 1400.
      Given an event-time watermark stage reading column ts as unixtimestamp_ms with a late tolerance of 500 ms
      When these events arrive in one batch:
        | key | raw  |
        | a   | 1500 |
        | b   | 1400 |
      When these events arrive in the next batch:
        | key | raw  |
        | c   | 1000 |
        | d   | 1001 |
        | e   | 400  |
      Then the late table is:
        | batch | seq | key | event_time | watermark |
        | 1     | 0   | c   | 1000       | 1000      |
        | 1     | 2   | e   | 400        | 1000      |
      And the output stream is:
        | batch | kind      | key | event_time | watermark |
        | 0     | watermark | -   | -          | 1000      |
      And the progress table is:
        | batch | watermark | max_timestamp_seen | buffer_size | late_dropped_count | watermark_emitted_count |
        | 0     | 1000      | 1500               | 2           | 0                  | 1                       |
        | 1     | 1000      | 1500               | 3           | 2                  | 1                       |

    @VELO-R15 @VELO-R17 @VELO-R23
    Scenario: Tuples with equal times leave in the order they arrived, also across batches
      Given an event-time watermark stage reading column ts as unixtimestamp_ms with a late tolerance of 100 ms
      When these events arrive in one batch:
        | key | raw | value |
        | a   | 50  | 1     |
        | b   | 60  | 2     |
        | c   | 50  | 3     |
      When these events arrive in the next batch:
        | key | raw | value |
        | d   | 60  | 4     |
        | e   | 50  | 5     |
        | f   | 300 | 6     |
      Then the output stream is:
        | batch | kind      | key | event_time | value | watermark | arrival_batch | arrival_seq |
        | 0     | watermark | -   | -          | -     | -40       | -             | -           |
        | 1     | tuple     | a   | 50         | 1     | -         | 0             | 0           |
        | 1     | tuple     | c   | 50         | 3     | -         | 0             | 2           |
        | 1     | tuple     | e   | 50         | 5     | -         | 1             | 1           |
        | 1     | tuple     | b   | 60         | 2     | -         | 0             | 1           |
        | 1     | tuple     | d   | 60         | 4     | -         | 1             | 0           |
        | 1     | watermark | -   | -          | -     | 200       | -             | -           |

    @VELO-R19 @VELO-R14 @VELO-R16
    Scenario: With a tolerance of 0 a duplicate of the latest time is kept in its own batch and dropped in a later one
      Given an event-time watermark stage reading column ts as unixtimestamp_ms with a late tolerance of 0 ms
      When these events arrive in one batch:
        | key | raw |
        | a   | 100 |
        | b   | 100 |
        | c   | 90  |
      When these events arrive in the next batch:
        | key | raw |
        | d   | 100 |
        | e   | 101 |
      Then the output stream is:
        | batch | kind      | key | event_time | watermark |
        | 0     | tuple     | c   | 90         | -         |
        | 0     | tuple     | a   | 100        | -         |
        | 0     | tuple     | b   | 100        | -         |
        | 0     | watermark | -   | -          | 100       |
        | 1     | tuple     | e   | 101        | -         |
        | 1     | watermark | -   | -          | 101       |
      And the late table is:
        | batch | seq | key | event_time | watermark |
        | 1     | 0   | d   | 100        | 100       |

    @VELO-R19
    Scenario: A tuple exactly the tolerance behind the maximum is late, one millisecond newer is not
      Given an event-time watermark stage reading column ts as unixtimestamp_ms with a late tolerance of 1000 ms
      When these events arrive in one batch:
        | key | raw  |
        | a   | 5000 |
      When these events arrive in the next batch:
        | key | raw  |
        | b   | 4000 |
        | c   | 4001 |
      Then the late table is:
        | batch | seq | key | event_time | watermark |
        | 1     | 0   | b   | 4000       | 4000      |
      And the output stream in the last batch is:
        | kind |
      And the progress table is:
        | batch | watermark | buffer_size | late_dropped_count |
        | 0     | 4000      | 1           | 0                  |
        | 1     | 4000      | 2           | 1                  |

    @VELO-R16 @VELO-R22
    Scenario: A batch that does not raise the maximum emits no watermark
      Given an event-time watermark stage reading column ts as unixtimestamp_ms with a late tolerance of 500 ms
      When these events arrive in one batch:
        | key | raw  |
        | a   | 2000 |
      When these events arrive in the next batch:
        | key | raw  |
        | b   | 1800 |
        | c   | 1600 |
      Then the output stream in the last batch is:
        | kind |
      And the progress table is:
        | batch | watermark | max_timestamp_seen | buffer_size | watermark_emitted_count |
        | 0     | 1500      | 2000               | 1           | 1                       |
        | 1     | 1500      | 2000               | 3           | 1                       |

    @VELO-R13 @VELO-R5 @TR-2
    Scenario: Before the first watermark nothing is late, and times before 1970 are times like any other
      Given an event-time watermark stage reading column ts as unixtimestamp_ms with a late tolerance of 10 ms
      When these events arrive in one batch:
        | key | raw   |
      Then the progress table is:
        | batch | watermark | max_timestamp_seen | buffer_size |
        | 0     | -         | -                  | 0           |
      When these events arrive in the next batch:
        | key | raw   |
        | a   | -5    |
        | b   | -40   |
        | c   | 0     |
      Then the output stream is:
        | batch | kind      | key | event_time | watermark |
        | 1     | tuple     | b   | -40        | -         |
        | 1     | watermark | -   | -          | -10       |
      And the late table is empty

    @VELO-R16 @TR-2
    Scenario: The target watermark saturates at the lower bound of time
      Given an event-time watermark stage reading column ts as unixtimestamp_ms with a late tolerance of I64_MAX ms
      When these events arrive in one batch:
        | key | raw |
        | a   | -10 |
      When these events arrive in the next batch:
        | key | raw                  |
        | b   | -9223372036854775808 |
        | c   | -9223372036854775807 |
      Then the output stream is:
        | batch | kind      | watermark |
        | 0     | watermark | I64_MIN   |
      And the late table is:
        | batch | seq | key | event_time | watermark |
        | 1     | 0   | b   | I64_MIN    | I64_MIN   |
      And the progress table is:
        | batch | watermark | max_timestamp_seen | buffer_size |
        | 0     | I64_MIN   | -10                | 1           |
        | 1     | I64_MIN   | -10                | 2           |

  Rule: Progress is driven by data only; only the end item flushes the buffer

    @VELO-R20 @VELO-R21 @TR-5
    Scenario: Empty batches and clock items move nothing, and what is buffered when the input stops stays buffered
      A source that stops sending is the classic stall: the last tuples wait for
      a newer tuple that never comes. Without an end item, the end of the trace
      is not a signal.
      Given an event-time watermark stage reading column ts as unixtimestamp_ms with a late tolerance of 1000 ms
      When these events arrive in one batch:
        | key | raw  |
        | a   | 5000 |
        | b   | 4500 |
        | c   | 3000 |
      When 2 empty batches pass
      When the processing clock advances to 60000 ms
      Then the output stream is:
        | batch | kind      | key | event_time | watermark |
        | 0     | tuple     | c   | 3000       | -         |
        | 0     | watermark | -   | -          | 4000      |
      And the progress table is:
        | batch | watermark | buffer_size | watermark_emitted_count |
        | 0     | 4000      | 2           | 1                       |
        | 1     | 4000      | 2           | 1                       |
        | 2     | 4000      | 2           | 1                       |
        | 3     | 4000      | 2           | 1                       |

    @VELO-R24 @VELO-R21 @TR-5
    Scenario Outline: A restart keeps the buffer and the arrival order
      Given an event-time watermark stage reading column ts as unixtimestamp_ms with a late tolerance of 100 ms
      When these events arrive in one batch:
        | key | raw | value |
        | a   | 150 | 1     |
        | b   | 100 | 2     |
        | c   | 20  | 3     |
      When the engine <restarts>
      When these events arrive in the next batch:
        | key | raw | value |
        | d   | 100 | 4     |
        | e   | 50  | 5     |
        | f   | 260 | 6     |
      When the engine <restarts>
      When an empty batch passes
      Then the output stream is:
        | batch | kind      | key | event_time | value | watermark | arrival_batch | arrival_seq |
        | 0     | tuple     | c   | 20         | 3     | -         | 0             | 2           |
        | 0     | watermark | -   | -          | -     | 50        | -             | -           |
        | 1     | tuple     | b   | 100        | 2     | -         | 0             | 1           |
        | 1     | tuple     | d   | 100        | 4     | -         | 1             | 0           |
        | 1     | tuple     | a   | 150        | 1     | -         | 0             | 0           |
        | 1     | watermark | -   | -          | -     | 160       | -             | -           |
      And the late table is:
        | batch | seq | key | event_time | watermark |
        | 1     | 1   | e   | 50         | 50        |
      And the progress table is:
        | batch | watermark | max_timestamp_seen | buffer_size | late_dropped_count | watermark_emitted_count |
        | 0     | 50        | 150                | 2           | 0                  | 1                       |
        | 1     | 160       | 260                | 1           | 1                  | 2                       |
        | 2     | 160       | 260                | 1           | 1                  | 2                       |

      Examples:
        | restarts                       |
        | restarts from its checkpoint   |
        | keeps running                  |

    @VELO-R25 @VELO-R14 @VELO-R16 @VELO-R17 @VELO-R19 @VELO-R22 @VELO-R24 @TR-5
    Scenario: A first batch cut after one tuple instead of three drops the tuple at 20 too, and ends with the same watermark and buffer
      The items of the restart scenario above, the first batch ending after a at 150 instead
      of after c at 20, and the restart moved after the second batch. The first batch's target
      is 50 (150 - 100) as before, but it releases nothing: a is above it. b, c, d, e and f
      are now one collection judged by 50, so c at 20 is late as well as e at 50 (R14): above,
      c was kept because it came with a, before any watermark. The second batch raises the
      maximum to 260 and the target to 160 and releases b and d (100, in arrival order) and a.
      After all six items the stage stands as it did above (R25): watermark 160, maximum 260,
      f buffered, every other tuple released or dropped. Only the late rows, c no longer
      released, and late_dropped_count (2, was 1) tell the cuts apart; watermark_emitted_count
      is 2 in both.
      Given an event-time watermark stage reading column ts as unixtimestamp_ms with a late tolerance of 100 ms
      When these events arrive in one batch:
        | key | raw | value |
        | a   | 150 | 1     |
      When these events arrive in the next batch:
        | key | raw | value |
        | b   | 100 | 2     |
        | c   | 20  | 3     |
        | d   | 100 | 4     |
        | e   | 50  | 5     |
        | f   | 260 | 6     |
      When the engine restarts from its checkpoint
      When an empty batch passes
      Then the output stream is:
        | batch | kind      | key | event_time | value | watermark | arrival_batch | arrival_seq |
        | 0     | watermark | -   | -          | -     | 50        | -             | -           |
        | 1     | tuple     | b   | 100        | 2     | -         | 1             | 0           |
        | 1     | tuple     | d   | 100        | 4     | -         | 1             | 2           |
        | 1     | tuple     | a   | 150        | 1     | -         | 0             | 0           |
        | 1     | watermark | -   | -          | -     | 160       | -             | -           |
      And the late table is:
        | batch | seq | key | event_time | watermark |
        | 1     | 1   | c   | 20         | 50        |
        | 1     | 3   | e   | 50         | 50        |
      And the progress table is:
        | batch | watermark | max_timestamp_seen | buffer_size | late_dropped_count | watermark_emitted_count |
        | 0     | 50        | 150                | 1           | 0                  | 1                       |
        | 1     | 160       | 260                | 1           | 2                  | 2                       |
        | 2     | 160       | 260                | 1           | 2                  | 2                       |
      And there are no errors

    @VELO-R21 @VELO-R16 @VELO-R17 @VELO-R22 @VELO-R24 @TR-14 @TR-5
    Scenario Outline: The end releases everything buffered in event-time order, then the final watermark I64_MAX
      Without the end, the second batch would raise the watermark to 5000 (6000 - 1000)
      and release the tuples up to it. With it, every buffered tuple leaves, 6000 too,
      ties in arrival order, and the one watermark of that batch is the end of time.
      Given an event-time watermark stage reading column ts as unixtimestamp_ms with a late tolerance of 1000 ms
      When these events arrive in one batch:
        | key | raw  | value |
        | a   | 5000 | 1     |
        | b   | 4500 | 2     |
        | c   | 3000 | 3     |
      When the engine <restarts>
      When these events arrive in the next batch:
        | key | raw  | value |
        | d   | 6000 | 4     |
        | e   | 4500 | 5     |
      And the input ends in the same batch
      When the engine <restarts>
      When these events arrive in the next batch:
        | key | raw  | value |
        | f   | 7000 | 6     |
      Then the output stream is:
        | batch | kind      | key | event_time | value | watermark           | arrival_batch | arrival_seq |
        | 0     | tuple     | c   | 3000       | 3     | -                   | 0             | 2           |
        | 0     | watermark | -   | -          | -     | 4000                | -             | -           |
        | 1     | tuple     | b   | 4500       | 2     | -                   | 0             | 1           |
        | 1     | tuple     | e   | 4500       | 5     | -                   | 1             | 1           |
        | 1     | tuple     | a   | 5000       | 1     | -                   | 0             | 0           |
        | 1     | tuple     | d   | 6000       | 4     | -                   | 1             | 0           |
        | 1     | watermark | -   | -          | -     | 9223372036854775807 | -             | -           |
      And the errors are:
        | batch | seq | reason    |
        | 2     | 0   | after_end |
      And the late table is empty
      And the progress table is:
        | batch | watermark | max_timestamp_seen | buffer_size | late_dropped_count | watermark_emitted_count |
        | 0     | 4000      | 5000               | 2           | 0                  | 1                       |
        | 1     | I64_MAX   | 6000               | 0           | 0                  | 2                       |
        | 2     | I64_MAX   | 6000               | 0           | 0                  | 2                       |

      Examples:
        | restarts                     |
        | restarts from its checkpoint |
        | keeps running                |

    @VELO-R21 @VELO-R12 @VELO-R14 @VELO-R17 @VELO-R23 @TR-14 @TR-7
    Scenario: The events before the end are a last collection, and every item after the end is an error row after_end
      c at 200 is late (the watermark is 200) and d's cell fails to parse, as in any
      collection. After the end, a bad cell, a clock going back and a second end are all
      after_end (checked first), and they change nothing, in the end's batch and later.
      Given an event-time watermark stage reading column ts as unixtimestamp_ms with a late tolerance of 100 ms
      When these items arrive in one batch:
        | kind  | key | raw | time |
        | clock |     |     | 500  |
        | event | a   | 300 |      |
        | event | b   | 150 |      |
      When these items arrive in the next batch:
        | kind  | key | raw    | time |
        | event | c   | 200    |      |
        | event | d   | "x"    |      |
        | event | e   | 250    |      |
        | end   |     |        |      |
        | event | f   | "junk" |      |
        | clock |     |        | 100  |
        | end   |     |        |      |
      When these items arrive in the next batch:
        | kind  | key | raw | time |
        | event | g   | 500 |      |
        | end   |     |     |      |
      Then the output stream is:
        | batch | kind      | key | event_time | watermark | reason               | arrival_batch | arrival_seq |
        | 0     | tuple     | b   | 150        | -         | -                    | 0             | 2           |
        | 0     | watermark | -   | -          | 200       | -                    | -             | -           |
        | 1     | error     | d   | -          | -         | unparsable_eventtime | 1             | 1           |
        | 1     | tuple     | e   | 250        | -         | -                    | 1             | 2           |
        | 1     | tuple     | a   | 300        | -         | -                    | 0             | 1           |
        | 1     | watermark | -   | -          | I64_MAX   | -                    | -             | -           |
      And the late table is:
        | batch | seq | key | event_time | watermark |
        | 1     | 0   | c   | 200        | 200       |
      And the errors are:
        | batch | seq | reason               |
        | 1     | 1   | unparsable_eventtime |
        | 1     | 4   | after_end            |
        | 1     | 5   | after_end            |
        | 1     | 6   | after_end            |
        | 2     | 0   | after_end            |
        | 2     | 1   | after_end            |
      And the progress table is:
        | batch | watermark | max_timestamp_seen | buffer_size | late_dropped_count | watermark_emitted_count |
        | 0     | 200       | 300                | 1           | 0                  | 1                       |
        | 1     | I64_MAX   | 300                | 0           | 1                  | 2                       |
        | 2     | I64_MAX   | 300                | 0           | 1                  | 2                       |

    @VELO-R21 @VELO-R13 @TR-14
    Scenario: An end before any tuple still states the final watermark
      Given an event-time watermark stage reading column ts as unixtimestamp_ms with a late tolerance of 0 ms
      When the input ends
      When these events arrive in the next batch:
        | key | raw |
        | a   | 10  |
      Then the output stream is:
        | batch | kind      | watermark |
        | 0     | watermark | I64_MAX   |
      And the errors are:
        | batch | seq | reason    |
        | 1     | 0   | after_end |
      And the progress table is:
        | batch | watermark | max_timestamp_seen | buffer_size | watermark_emitted_count |
        | 0     | I64_MAX   | -                  | 0           | 1                       |
        | 1     | I64_MAX   | -                  | 0           | 1                       |

    @VELO-R21 @VELO-R14 @VELO-R16 @VELO-R18 @TR-2
    Scenario: When the watermark is already I64_MAX the end emits no second one
      Watermarks strictly increase, and nothing can be buffered above the end of time.
      Given an event-time watermark stage reading column ts as unixtimestamp_ms with a late tolerance of 0 ms
      When these events arrive in one batch:
        | key | raw                 |
        | a   | 9223372036854775807 |
      When these events arrive in the next batch:
        | key | raw |
        | b   | 5   |
      And the input ends in the same batch
      Then the output stream is:
        | batch | kind      | key | event_time | watermark |
        | 0     | tuple     | a   | I64_MAX    | -         |
        | 0     | watermark | -   | -          | I64_MAX   |
      And the late table is:
        | batch | seq | key | event_time | watermark |
        | 1     | 0   | b   | 5          | I64_MAX   |
      And the progress table is:
        | batch | watermark | max_timestamp_seen | buffer_size | late_dropped_count | watermark_emitted_count |
        | 0     | I64_MAX   | I64_MAX            | 0           | 0                  | 1                       |
        | 1     | I64_MAX   | I64_MAX            | 0           | 1                  | 1                       |

  Rule: Parsing the event-time cell

    @VELO-R5 @VELO-R12
    Scenario: Which cells a millisecond parser reads
      A tolerance of 0 releases everything, so the output shows every parsed time.
      Given an event-time watermark stage reading column ts as unixtimestamp_ms with a late tolerance of 0 ms
      When these events arrive in one batch:
        | key        | raw                   |
        | int        | 1500                  |
        | negative   | -20                   |
        | string     | "1600"                |
        | zeros      | "007"                 |
        | neg_string | "-30"                 |
        | fraction   | 1.9                   |
        | neg_frac   | -0.5                  |
        | exponent   | 2e3                   |
        | point_zero | 1700.0                |
        | dec_string | "1.5"                 |
        | plus       | "+3"                  |
        | space      | " 15"                 |
        | empty      | ""                    |
        | text       | "abc"                 |
        | json_null  | null                  |
        | absent     |                       |
        | too_big    | 9223372036854775808   |
        | max        | 9223372036854775807   |
      Then the output stream is:
        | kind      | key        | event_time          | watermark           | reason                 |
        | error     | dec_string | -                   | -                   | unparsable_eventtime   |
        | error     | plus       | -                   | -                   | unparsable_eventtime   |
        | error     | space      | -                   | -                   | unparsable_eventtime   |
        | error     | empty      | -                   | -                   | unparsable_eventtime   |
        | error     | text       | -                   | -                   | unparsable_eventtime   |
        | error     | json_null  | -                   | -                   | null_eventtime         |
        | error     | absent     | -                   | -                   | null_eventtime         |
        | error     | too_big    | -                   | -                   | eventtime_out_of_range |
        | tuple     | neg_string | -30                 | -                   | -                      |
        | tuple     | negative   | -20                 | -                   | -                      |
        | tuple     | neg_frac   | -1                  | -                   | -                      |
        | tuple     | fraction   | 1                   | -                   | -                      |
        | tuple     | zeros      | 7                   | -                   | -                      |
        | tuple     | int        | 1500                | -                   | -                      |
        | tuple     | string     | 1600                | -                   | -                      |
        | tuple     | point_zero | 1700                | -                   | -                      |
        | tuple     | exponent   | 2000                | -                   | -                      |
        | tuple     | max        | I64_MAX             | -                   | -                      |
        | watermark | -          | -                   | I64_MAX             | -                      |
      And the errors are:
        | batch | seq | reason                 |
        | 0     | 9   | unparsable_eventtime   |
        | 0     | 10  | unparsable_eventtime   |
        | 0     | 11  | unparsable_eventtime   |
        | 0     | 12  | unparsable_eventtime   |
        | 0     | 13  | unparsable_eventtime   |
        | 0     | 14  | null_eventtime         |
        | 0     | 15  | null_eventtime         |
        | 0     | 16  | eventtime_out_of_range |

    @VELO-R5 @VELO-R3
    Scenario: A seconds parser multiplies exactly and rounds down
      Given an event-time watermark stage reading column ts as unixtimestamp_s with a late tolerance of 0 ms
      When these events arrive in one batch:
        | key      | raw                 |
        | exact    | 1.001               |
        | round    | 1.0015              |
        | negative | -0.0005             |
        | string   | "2"                 |
        | overflow | 9223372036854776    |
        | edge     | 9223372036854775    |
      Then the output stream is:
        | kind      | key      | event_time          | watermark           | reason                 |
        | error     | overflow | -                   | -                   | eventtime_out_of_range |
        | tuple     | negative | -1                  | -                   | -                      |
        | tuple     | exact    | 1001                | -                   | -                      |
        | tuple     | round    | 1001                | -                   | -                      |
        | tuple     | string   | 2000                | -                   | -                      |
        | tuple     | edge     | 9223372036854775000 | -                   | -                      |
        | watermark | -        | -                   | 9223372036854775000 | -                      |

    @VELO-R12 @VELO-R17 @VELO-R22
    Scenario: A cell that fails to parse becomes an error item before the batch's release, and the stream goes on
      Given an event-time watermark stage reading column ts as unixtimestamp_ms with a late tolerance of 0 ms
      When these events arrive in one batch:
        | key | raw   | value |
        | a   | 30    | 1     |
        | b   | "x30" | 2     |
        | c   | 10    | 3     |
      When these events arrive in the next batch:
        | key | raw  | value |
        | d   | 40   | 4     |
        | e   | null | 5     |
      Then the output stream is:
        | batch | kind      | key | event_time | value | watermark | reason               |
        | 0     | error     | b   | -          | 2     | -         | unparsable_eventtime |
        | 0     | tuple     | c   | 10         | 3     | -         | -                    |
        | 0     | tuple     | a   | 30         | 1     | -         | -                    |
        | 0     | watermark | -   | -          | -     | 30        | -                    |
        | 1     | error     | e   | -          | 5     | -         | null_eventtime       |
        | 1     | tuple     | d   | 40         | 4     | -         | -                    |
        | 1     | watermark | -   | -          | -     | 40        | -                    |
      And the errors are:
        | batch | seq | reason               |
        | 0     | 1   | unparsable_eventtime |
        | 1     | 1   | null_eventtime       |
      And the progress table is:
        | batch | max_timestamp_seen | buffer_size | late_dropped_count | watermark_emitted_count |
        | 0     | 30                 | 0           | 0                  | 1                       |
        | 1     | 40                 | 0           | 0                  | 2                       |

    @VELO-R11
    Scenario: A tuple of several messages takes its time from the first message whose stream declares event time
      The users stream declares no event time, so the orders message decides;
      when the first declaring message fails, a later one is not tried.
      Given eventtime buffer configured with:
        | setting           | value                                                                                     |
        | stream_name       | "users"                                                                                   |
        | columns           | ["user_id"]                                                                               |
        | joined_streams    | {"orders": {"columns": ["order_id", "ts"], "eventtime_column": "ts", "eventtime_type": "unixtimestamp_s"}, "clicks": {"columns": ["at"], "eventtime_column": "at", "eventtime_type": "unixtimestamp_ms"}} |
        | eventtime_enabled | true                                                                                      |
      When these events arrive in one batch:
        | key      | messages                                          |
        | joined   | [["users", null], ["orders", 2], ["clicks", 500]] |
        | clicks   | [["clicks", 700], ["orders", 1]]                  |
        | bad      | [["users", 5], ["orders", "x"], ["clicks", 100]]  |
        | stranger | [["orders", 1], ["payments", 1]]                  |
        | nothing  | [["users", 5]]                                    |
        | empty    | []                                                |
        | plain    |                                                   |
      Then the output stream is:
        | kind      | key     | event_time | watermark | reason               |
        | error     | bad     | -          | -         | unparsable_eventtime |
        | error     | stranger| -          | -         | unknown_stream       |
        | error     | nothing | -          | -         | no_eventtime_message |
        | error     | empty   | -          | -         | no_eventtime_message |
        | error     | plain   | -          | -         | no_eventtime_message |
        | tuple     | clicks  | 700        | -         | -                    |
        | tuple     | joined  | 2000       | -         | -                    |
        | watermark | -       | -          | 2000      | -                    |

  Rule: Stream definitions, the registry and validation at planning time

    @VELO-R3
    Scenario: unixtimestamp is not a built-in type
      The seed's registry section names it, its built-in list and checklist do not.
      Given an event-time watermark stage reading column ts as unixtimestamp with a late tolerance of 0 ms
      Then the configuration is rejected

    @VELO-R3 @VELO-R4
    Scenario: unixtimestamp registered from the catalogue reads seconds
      Given an event-time watermark stage reading column ts as unixtimestamp with a late tolerance of 0 ms
      And eventtime buffer configured with:
        | setting          | value             |
        | register_parsers | ["unixtimestamp"] |
      When these events arrive in one batch:
        | key | raw |
        | a   | 3   |
      Then the output stream is:
        | kind      | key | event_time | watermark |
        | tuple     | a   | 3000       | -         |
        | watermark | -   | -          | 3000      |

    @VELO-R4 @VELO-R5
    Scenario: The microseconds parser from the catalogue rounds down to whole milliseconds
      Given an event-time watermark stage reading column ts as unixtimestamp_us with a late tolerance of 0 ms
      And eventtime buffer configured with:
        | setting          | value                |
        | register_parsers | ["unixtimestamp_us"] |
      When these events arrive in one batch:
        | key | raw    |
        | a   | 1999   |
        | b   | -1     |
        | c   | "2500" |
        | d   | 0.9    |
      Then the output stream is:
        | kind      | key | event_time | watermark |
        | tuple     | b   | -1         | -         |
        | tuple     | d   | 0          | -         |
        | tuple     | a   | 1          | -         |
        | tuple     | c   | 2          | -         |
        | watermark | -   | -          | 2         |

    @VELO-R1 @VELO-R2 @VELO-R3 @VELO-R7 @TR-6
    Scenario Outline: A bad stream definition or option is refused at planning time
      Given an event-time watermark stage reading column ts as unixtimestamp_ms with a late tolerance of 0 ms
      And eventtime buffer configured with:
        | setting   | value   |
        | <setting> | <value> |
      When these events arrive in one batch:
        | key | raw |
        | a   | 1   |
      Then the configuration is rejected

      Examples: missing column, unknown type, half declarations
        | setting           | value                                                  |
        | columns           | ["id", "timestamp"]                                    |
        | eventtime_type    | "iso8601"                                              |
        | eventtime_type    | "unixtimestamp"                                        |
        | eventtime_type    | none                                                   |
        | eventtime_column  | none                                                   |
        | joined_streams    | {"orders": {"columns": ["id"], "eventtime_column": "ts", "eventtime_type": "unixtimestamp_ms"}} |
        | joined_streams    | {"orders": {"columns": ["ts"], "eventtime_column": "ts", "eventtime_type": "nope"}}             |
        | joined_streams    | {"input": {"columns": ["ts"]}}                        |
        | joined_streams    | {"orders": {"columns": ["ts"], "eventtime_column": "ts"}}                                       |
        | columns           | ["ts", "ts"]                                           |
        | columns           | "ts"                                                   |
        | stream_name       | ""                                                     |

      Examples: the registry and the options
        | setting           | value                              |
        | register_parsers  | ["unixtimestamp_s"]                |
        | register_parsers  | ["unixtimestamp", "unixtimestamp"] |
        | register_parsers  | ["iso8601"]                        |
        | late_tolerance    | -1                                 |
        | late_tolerance    | true                               |
        | late_tolerance    | 1.5                                |
        | eventtime_enabled | "yes"                              |
        | watermark_delay   | 5                                  |

    @VELO-R2 @VELO-R7 @VELO-R8
    Scenario: A declaration is checked even when event time is off
      Given a processing-time watermark stage
      And eventtime buffer configured with:
        | setting          | value            |
        | eventtime_column | "ts"             |
        | eventtime_type   | "unixtimestamp_ms" |
      Then the configuration is rejected

    @VELO-R7 @VELO-R8
    Scenario: Event time needs a stream that declares it
      Given eventtime buffer configured with:
        | setting           | value     |
        | columns           | ["ts"]    |
        | eventtime_enabled | true      |
      Then the configuration is rejected

  Rule: Processing-time mode

    @VELO-R8 @VELO-R9 @VELO-R22 @TR-4
    Scenario: Without event time, tuples are stamped by the processing clock and pass at once; a clock move emits a watermark
      Cells are not read at all: "junk" is no error here.
      Given a processing-time watermark stage
      When these items arrive in one batch:
        | kind  | key | raw    | time |
        | event | a   | 900    |      |
        | clock |     |        | 100  |
        | event | b   | "junk" |      |
        | event | c   | 5      |      |
        | clock |     |        | 100  |
        | clock |     |        | 250  |
      When these items arrive in the next batch:
        | kind  | key | time |
        | event | d   |      |
      Then the output stream is:
        | batch | kind      | key | event_time | watermark |
        | 0     | tuple     | a   | 0          | -         |
        | 0     | watermark | -   | -          | 99        |
        | 0     | tuple     | b   | 100        | -         |
        | 0     | tuple     | c   | 100        | -         |
        | 0     | watermark | -   | -          | 249       |
        | 1     | tuple     | d   | 250        | -         |
      And there are no errors
      And the progress table is:
        | batch | watermark | max_timestamp_seen | buffer_size | late_dropped_count | watermark_emitted_count |
        | 0     | 249       | 100                | 0           | 0                  | 2                       |
        | 1     | 249       | 250                | 0           | 0                  | 2                       |

    @VELO-R21 @VELO-R9 @VELO-R17 @VELO-R22 @TR-14
    Scenario: In processing-time mode the end emits Watermark(I64_MAX) in its place
      Nothing is buffered, so nothing is released: the final watermark follows every
      tuple stamped before the end, and every later item is after_end.
      Given a processing-time watermark stage
      When these items arrive in one batch:
        | kind  | key | time |
        | event | a   |      |
        | clock |     | 100  |
        | event | b   |      |
        | end   |     |      |
        | event | c   |      |
      When the processing clock advances to 200 ms
      Then the output stream is:
        | batch | kind      | key | event_time | watermark | arrival_batch | arrival_seq |
        | 0     | tuple     | a   | 0          | -         | 0             | 0           |
        | 0     | watermark | -   | -          | 99        | -             | -           |
        | 0     | tuple     | b   | 100        | -         | 0             | 2           |
        | 0     | watermark | -   | -          | I64_MAX   | -             | -           |
      And the errors are:
        | batch | seq | reason    |
        | 0     | 4   | after_end |
        | 1     | 0   | after_end |
      And the progress table is:
        | batch | watermark | max_timestamp_seen | buffer_size | late_dropped_count | watermark_emitted_count |
        | 0     | I64_MAX   | 100                | 0           | 0                  | 2                       |
        | 1     | I64_MAX   | 100                | 0           | 0                  | 2                       |

    @VELO-R8 @VELO-R9
    Scenario: A declared event-time column is ignored while event time is off
      Given an event-time watermark stage reading column ts as unixtimestamp_ms with a late tolerance of 0 ms
      And eventtime buffer configured with:
        | setting           | value |
        | eventtime_enabled | false |
      When these events arrive in one batch:
        | key | raw  |
        | a   | 500  |
        | b   | 100  |
      Then the output stream is:
        | kind  | key | event_time |
        | tuple | a   | 0          |
        | tuple | b   | 0          |

  Rule: Malformed items

    @VELO-R23 @TR-4 @TR-7
    Scenario: Malformed items are error rows that change nothing and emit nothing
      Given an event-time watermark stage reading column ts as unixtimestamp_ms with a late tolerance of 0 ms
      When these items arrive in one batch:
        | kind       | key | raw | time |
        | clock      |     |     | 500  |
        | clock      |     |     |      |
        | clock      |     |     | 400  |
        | idle       | a   |     |      |
        | remove_key | a   |     |      |
        | event      | a   | 10  |      |
      Then the errors are:
        | batch | seq | reason               |
        | 0     | 1   | missing_time         |
        | 0     | 2   | clock_went_backwards |
        | 0     | 3   | unsupported_item     |
        | 0     | 4   | unsupported_item     |
      And the output stream is:
        | kind      | key | event_time | watermark |
        | tuple     | a   | 10         | -         |
        | watermark | -   | -          | 10        |

    @TR-15 @VELO-R23 @VELO-R12
    Scenario: Every row of a repeated seq is a duplicate_seq error row that emits nothing
      The table's two rows at seq 1 were the same tuple delivered twice: both are error
      rows, neither is buffered, and the output holds the other tuples only.
      Given an event-time watermark stage reading column ts as unixtimestamp_ms with a late tolerance of 0 ms
      When these items arrive in one batch:
        | kind          | key | raw |
        | event         | a   | 10  |
        | duplicate_seq |     |     |
        | duplicate_seq |     |     |
        | event         | b   | 20  |
      Then the errors are:
        | batch | seq | reason        |
        | 0     | 1   | duplicate_seq |
        | 0     | 2   | duplicate_seq |
      And the output stream is:
        | kind      | key | event_time | watermark |
        | tuple     | a   | 10         | -         |
        | tuple     | b   | 20         | -         |
        | watermark | -   | -          | 20        |

  Rule: The registry API (oracle-only)

    @oracle-only @VELO-R6 @VELO-R3 @TR-10
    Scenario: A user registers a parser as code and the registry lists it
      Parsers given as code have no stream meaning: a trace can only name
      catalogue parsers.
      Given a new EventtimeTypeRegistry
      Then the registry lists unixtimestamp_ms, unixtimestamp_s
      When the user registers ticks as a parser of 10 ms ticks
      Then the registry lists ticks, unixtimestamp_ms, unixtimestamp_s
      And ticks parses these cells:
        | cell | event_time | reason           |
        | 7    | 70         |                  |
        | "7"  | -          | not_a_tick_count |
      When the user registers unixtimestamp_s as a parser of 10 ms ticks
      Then the registration is refused with DuplicateEventtimeType
      And unixtimestamp_s parses these cells:
        | cell | event_time | reason |
        | 2    | 2000       |        |
      And resolving unixtimestamp raises UnknownEventtimeType naming ticks, unixtimestamp_ms, unixtimestamp_s
