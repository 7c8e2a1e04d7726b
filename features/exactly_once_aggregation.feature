@OXE
Feature: Exactly-once aggregation
  An aggregator folds messages into one value per key (a count, a sum, a minimum, a maximum
  or a mean) and filters the messages a producer or a broker delivers more than once by
  their id (producer, partition, sequence). Per channel (producer, partition) it remembers
  the sequences it folded in a window of `dedup_window` sequences below the greatest one:
  a sequence it remembers is a duplicate, one below the window is reported as outside the
  window, and neither is folded. Clauses: spec/exactly_once_aggregation.md.

  A message's amount is written as JSON text: 1.5, -0.0, "NaN", "Infinity" and "-Infinity"
  are amounts; true, null, "abc" or 1e400 are not. Batches are numbered from 0 as in the
  output tables: each When step that adds items is one new batch unless it says "in the same
  batch" (see harness/steps.py). A `value` cell is the text of a double (OXE-R17) and "-" in
  an expected table is null.

  Rule: Every message gets one verdict, in arrival order

    @OXE-R1 @OXE-R3 @OXE-R5 @OXE-R7 @OXE-R18
    Scenario: A message delivered twice in one batch is folded once
      The second delivery is judged after the first, in arrival order, like a delivery in a
      later batch.
      Given exactly-once aggregation with a sum aggregate and a de-duplication window of 4 sequences
      When these messages arrive in one batch:
        | producer | partition | sequence | key | amount |
        | 1        | 0         | 1        | a   | 10     |
        | 1        | 0         | 2        | a   | 5      |
        | 1        | 0         | 1        | a   | 10     |
      Then the messages are:
        | batch | seq | producer | partition | sequence | key | verdict   |
        | 0     | 0   | 1        | 0         | 1        | a   | folded    |
        | 0     | 1   | 1        | 0         | 2        | a   | folded    |
        | 0     | 2   | 1        | 0         | 1        | a   | duplicate |
      And the aggregates are:
        | batch | key | kind | number | count |
        | 0     | a   | sum  | 15.0  | -     |
      And the progress is:
        | batch | folded | duplicates | outside_window | keys |
        | 0     | 2      | 1          | 0              | 1    |
      And there are no errors

    @OXE-R1 @OXE-R3 @OXE-R5 @OXE-R18
    Scenario: A re-delivery with another amount or key is still a re-delivery: the first delivery counts
      The id is what identifies a message; its content is not compared. Key b never gets a
      value: its only message was a duplicate.
      Given exactly-once aggregation with the default configuration
      When these messages arrive in one batch:
        | producer | partition | sequence | key | amount |
        | 1        | 0         | 7        | a   | 10     |
        | 1        | 0         | 7        | a   | 99     |
        | 1        | 0         | 7        | b   | 1      |
      And these messages arrive in the next batch:
        | producer | partition | sequence | key | amount |
        | 1        | 0         | 7        | a   | 7      |
      Then the messages are:
        | batch | seq | sequence | key | verdict   |
        | 0     | 0   | 7        | a   | folded    |
        | 0     | 1   | 7        | a   | duplicate |
        | 0     | 2   | 7        | b   | duplicate |
        | 1     | 0   | 7        | a   | duplicate |
      And the aggregates are:
        | batch | key | kind | number | count |
        | 0     | a   | sum  | 10.0  | -     |
      And the aggregate values are:
        | key | kind | number |
        | a   | sum  | 10.0  |
      And the progress is:
        | batch | folded | duplicates | outside_window | keys |
        | 0     | 1      | 2          | 0              | 1    |
        | 1     | 1      | 3          | 0              | 1    |

    @OXE-R1 @OXE-R6
    Scenario: The same sequence on another channel is another message
      Producer and partition are signed 64-bit integers; each pair is a channel of its own.
      Given exactly-once aggregation with a count aggregate and a de-duplication window of 4 sequences
      When these messages arrive in one batch:
        | producer | partition | sequence | key | amount |
        | 1        | 0         | 1        | a   | 1      |
        | 1        | 1         | 1        | a   | 1      |
        | 2        | 0         | 1        | a   | 1      |
        | -1       | 0         | 1        | a   | 1      |
        | I64_MIN  | I64_MAX   | 1        | a   | 1      |
        | 1        | 0         | 1        | a   | 1      |
      Then the messages are:
        | seq | producer | partition | verdict   |
        | 0   | 1        | 0         | folded    |
        | 1   | 1        | 1         | folded    |
        | 2   | 2        | 0         | folded    |
        | 3   | -1       | 0         | folded    |
        | 4   | I64_MIN  | I64_MAX   | folded    |
        | 5   | 1        | 0         | duplicate |
      And the aggregates are:
        | batch | key | kind  | number | count |
        | 0     | a   | count | -     | 5     |

    @OXE-R2 @OXE-R3 @OXE-R6 @OXE-R18
    Scenario: Inside the window a sequence is folded once; at or below high minus the window it is outside
      With a window of 3 and high 4 the channel remembers 2, 3 and 4; 1 is outside. Sequence 6
      moves high to 6 and the window to (3, 6]: 3 falls out, and 5, never folded, is folded
      although it arrives after 6.
      Given exactly-once aggregation with a count aggregate and a de-duplication window of 3 sequences
      When these messages arrive in one batch:
        | producer | partition | sequence | key | amount |
        | 7        | 0         | 1        | a   | 1      |
        | 7        | 0         | 2        | a   | 1      |
        | 7        | 0         | 3        | a   | 1      |
        | 7        | 0         | 4        | a   | 1      |
      And these messages arrive in the next batch:
        | producer | partition | sequence | key | amount |
        | 7        | 0         | 3        | a   | 1      |
        | 7        | 0         | 1        | a   | 1      |
        | 7        | 0         | 2        | a   | 1      |
        | 7        | 0         | 6        | a   | 1      |
        | 7        | 0         | 5        | a   | 1      |
        | 7        | 0         | 3        | a   | 1      |
        | 7        | 0         | 4        | a   | 1      |
      Then the messages in the last batch are:
        | seq | sequence | verdict        |
        | 0   | 3        | duplicate      |
        | 1   | 1        | outside window |
        | 2   | 2        | duplicate      |
        | 3   | 6        | folded         |
        | 4   | 5        | folded         |
        | 5   | 3        | outside window |
        | 6   | 4        | duplicate      |
      And the aggregates are:
        | batch | key | kind  | number | count |
        | 0     | a   | count | -     | 4     |
        | 1     | a   | count | -     | 6     |
      And the progress is:
        | batch | folded | duplicates | outside_window | keys |
        | 0     | 4      | 0          | 0              | 1    |
        | 1     | 6      | 3          | 2              | 1    |

    @OXE-R3 @OXE-R18
    Scenario: A first delivery that arrives after its channel moved past the window is reported, not folded
      The aggregator cannot tell a late first delivery from a forgotten re-delivery. With
      high 10 and a window of 3, sequence 7 is outside and 8 is inside and new.
      Given exactly-once aggregation with a sum aggregate and a de-duplication window of 3 sequences
      When these messages arrive in one batch:
        | producer | partition | sequence | key | amount |
        | 1        | 0         | 10       | a   | 1      |
        | 1        | 0         | 7        | a   | 2      |
        | 1        | 0         | 8        | a   | 4      |
        | 1        | 0         | 0        | a   | 8      |
      Then the messages are:
        | seq | sequence | verdict        |
        | 0   | 10       | folded         |
        | 1   | 7        | outside window |
        | 2   | 8        | folded         |
        | 3   | 0        | outside window |
      And the aggregate values are:
        | key | kind | number | count |
        | a   | sum  | 5.0   | -     |
      And the progress is:
        | batch | folded | duplicates | outside_window | keys |
        | 0     | 2      | 0          | 2              | 1    |

    @OXE-R2 @OXE-R3 @OXE-R4 @OXE-R18
    Scenario: A slow channel is not forgotten because a fast one moved on
      The window slides per channel: after the fast channel reached 6, the slow channel's
      sequence 1 is still remembered, and the fast channel's 1 is outside its window of 2.
      Given exactly-once aggregation with a count aggregate and a de-duplication window of 2 sequences
      When these messages arrive in one batch:
        | producer | partition | sequence | key  | amount |
        | 1        | 0         | 1        | slow | 1      |
        | 2        | 0         | 1        | fast | 1      |
        | 2        | 0         | 2        | fast | 1      |
        | 2        | 0         | 3        | fast | 1      |
        | 2        | 0         | 4        | fast | 1      |
        | 2        | 0         | 5        | fast | 1      |
        | 2        | 0         | 6        | fast | 1      |
      And these messages arrive in the next batch:
        | producer | partition | sequence | key  | amount |
        | 1        | 0         | 1        | slow | 1      |
        | 2        | 0         | 1        | fast | 1      |
        | 2        | 0         | 5        | fast | 1      |
        | 1        | 0         | 2        | slow | 1      |
      Then the messages in the last batch are:
        | seq | producer | sequence | key  | verdict        |
        | 0   | 1        | 1        | slow | duplicate      |
        | 1   | 2        | 1        | fast | outside window |
        | 2   | 2        | 5        | fast | duplicate      |
        | 3   | 1        | 2        | slow | folded         |
      And the aggregates are:
        | batch | key  | kind  | count |
        | 0     | fast | count | 6     |
        | 0     | slow | count | 1     |
        | 1     | slow | count | 2     |
      And the progress is:
        | batch | folded | duplicates | outside_window | keys |
        | 0     | 7      | 0          | 0              | 2    |
        | 1     | 8      | 2          | 1              | 2    |

    @OXE-R2 @OXE-R3 @OXE-R15
    Scenario: The smallest window remembers only the greatest sequence
      Given exactly-once aggregation with a count aggregate and a de-duplication window of 1 sequence
      When these messages arrive in one batch:
        | producer | partition | sequence | key | amount |
        | 1        | 0         | 1        | a   | 1      |
        | 1        | 0         | 2        | a   | 1      |
        | 1        | 0         | 1        | a   | 1      |
        | 1        | 0         | 2        | a   | 1      |
        | 1        | 0         | 3        | a   | 1      |
      Then the messages are:
        | seq | sequence | verdict        |
        | 0   | 1        | folded         |
        | 1   | 2        | folded         |
        | 2   | 1        | outside window |
        | 3   | 2        | duplicate      |
        | 4   | 3        | folded         |
      And the progress is:
        | batch | folded | duplicates | outside_window | keys |
        | 0     | 3      | 1          | 1              | 1    |

    @OXE-R2 @OXE-R3 @OXE-R15
    Scenario: The largest window, 1,048,576 sequences
      With high 1,048,577 the window is (1, 1048577]: 1 is outside, 2 is inside and new.
      Given exactly-once aggregation with a count aggregate and a de-duplication window of 1_048_576 sequences
      When these messages arrive in one batch:
        | producer | partition | sequence  | key | amount |
        | 1        | 0         | 1_048_577 | a   | 1      |
        | 1        | 0         | 1         | a   | 1      |
        | 1        | 0         | 2         | a   | 1      |
        | 1        | 0         | 1_048_577 | a   | 1      |
      Then the messages are:
        | seq | sequence  | verdict        |
        | 0   | 1_048_577 | folded         |
        | 1   | 1         | outside window |
        | 2   | 2         | folded         |
        | 3   | 1_048_577 | duplicate      |
      And the aggregate values are:
        | key | kind  | count |
        | a   | count | 2     |

    @OXE-R15
    Scenario: The default configuration is a sum with a window of 1024 sequences
      Given exactly-once aggregation with the default configuration
      When these messages arrive in one batch:
        | producer | partition | sequence | key | amount |
        | 1        | 0         | 2000     | a   | 1      |
        | 1        | 0         | 976      | a   | 2      |
        | 1        | 0         | 977      | a   | 4      |
      Then the messages are:
        | seq | sequence | verdict        |
        | 0   | 2000     | folded         |
        | 1   | 976      | outside window |
        | 2   | 977      | folded         |
      And the aggregates are:
        | batch | key | kind | number | count |
        | 0     | a   | sum  | 5.0   | -     |

  Rule: Batches, restarts and re-delivery after a crash

    @OXE-R19 @OXE-R13 @OXE-R2 @OXE-R3 @OXE-R7 @OXE-R18 @TR-5
    Scenario Outline: The memory, the values and the totals cross a restart
      After the restart the producer re-sends: sequence 1 is outside the window of 2, 2 and
      b's 1 are remembered, 4 is new. Sum 0.1 + 0.2 + 0.3 is 0.6000000000000001, then 1.0.
      Given exactly-once aggregation with a sum aggregate and a de-duplication window of 2 sequences
      When these messages arrive in one batch:
        | producer | partition | sequence | key | amount |
        | 1        | 0         | 1        | a   | 0.1    |
        | 1        | 0         | 2        | a   | 0.2    |
        | 1        | 0         | 3        | a   | 0.3    |
        | 2        | 0         | 1        | b   | 1.5    |
      And the engine <restarts or keeps running>
      And these messages arrive in the next batch:
        | producer | partition | sequence | key | amount |
        | 1        | 0         | 1        | a   | 0.1    |
        | 1        | 0         | 2        | a   | 0.2    |
        | 2        | 0         | 1        | b   | 1.5    |
        | 1        | 0         | 4        | a   | 0.4    |
      Then the messages in the last batch are:
        | seq | producer | sequence | verdict        |
        | 0   | 1        | 1        | outside window |
        | 1   | 1        | 2        | duplicate      |
        | 2   | 2        | 1        | duplicate      |
        | 3   | 1        | 4        | folded         |
      And the aggregates are:
        | batch | key | kind | number             | count |
        | 0     | a   | sum  | 0.6000000000000001 | -     |
        | 0     | b   | sum  | 1.5                | -     |
        | 1     | a   | sum  | 1.0                | -     |
      And the progress is:
        | batch | folded | duplicates | outside_window | keys |
        | 0     | 4      | 0          | 0              | 2    |
        | 1     | 5      | 2          | 1              | 2    |

      Examples:
        | restarts or keeps running    |
        | restarts from its checkpoint |
        | keeps running                |

    @OXE-R19 @OXE-R3 @OXE-R7
    Scenario Outline: Where the batches are cut changes nothing but the batch and seq columns
      Given exactly-once aggregation with a sum aggregate and a de-duplication window of 8 sequences
      When these messages arrive <cut>:
        | producer | partition | sequence | key | amount |
        | 1        | 0         | 1        | a   | 0.1    |
        | 1        | 0         | 2        | a   | 0.2    |
        | 1        | 0         | 1        | a   | 0.1    |
        | 1        | 0         | 3        | a   | 0.3    |
      Then the messages are:
        | producer | partition | sequence | key | verdict   |
        | 1        | 0         | 1        | a   | folded    |
        | 1        | 0         | 2        | a   | folded    |
        | 1        | 0         | 1        | a   | duplicate |
        | 1        | 0         | 3        | a   | folded    |
      And the aggregate values are:
        | key | kind | number             | count |
        | a   | sum  | 0.6000000000000001 | -     |
      And the metrics are:
        | metric         | value |
        | folded         | 3     |
        | duplicates     | 1     |
        | outside_window | 0     |
        | keys           | 1     |

      Examples:
        | cut           |
        | in one batch  |
        | one per batch |

    @OXE-R19 @OXE-R3 @TR-5
    Scenario: A producer that re-sends after a restart point sends duplicates, never a second fold
      Given exactly-once aggregation with a count aggregate and a de-duplication window of 16 sequences
      When these messages arrive in one batch:
        | producer | partition | sequence | key | amount |
        | 3        | 1         | 1        | a   | 1      |
        | 3        | 1         | 2        | b   | 1      |
      And the engine restarts from its checkpoint
      And these messages arrive in the next batch:
        | producer | partition | sequence | key | amount |
        | 3        | 1         | 1        | a   | 1      |
        | 3        | 1         | 2        | b   | 1      |
        | 3        | 1         | 3        | a   | 1      |
      And the engine restarts from its checkpoint
      And these messages arrive in the next batch:
        | producer | partition | sequence | key | amount |
        | 3        | 1         | 3        | a   | 1      |
      Then the messages are:
        | batch | seq | sequence | verdict   |
        | 0     | 0   | 1        | folded    |
        | 0     | 1   | 2        | folded    |
        | 1     | 0   | 1        | duplicate |
        | 1     | 1   | 2        | duplicate |
        | 1     | 2   | 3        | folded    |
        | 2     | 0   | 3        | duplicate |
      And the aggregate values are:
        | key | kind  | count |
        | a   | count | 2     |
        | b   | count | 1     |

    @OXE-R5 @OXE-R18 @TR-5
    Scenario: An empty input is an empty state, not a row of zeros
      Given exactly-once aggregation with a count aggregate and a de-duplication window of 4 sequences
      When an empty batch passes
      Then the messages table is empty
      And the aggregates table is empty
      And the progress is:
        | batch | folded | duplicates | outside_window | keys |
        | 0     | 0      | 0          | 0              | 0    |
      And there are no errors

    @OXE-R18 @OXE-R5 @TR-5
    Scenario: Empty batches report their progress, and a key has a row only in a batch that folded for it
      Given exactly-once aggregation with a sum aggregate and a de-duplication window of 4 sequences
      When these messages arrive in one batch:
        | producer | partition | sequence | key | amount |
        | 1        | 0         | 1        | a   | 2      |
      And 2 empty batches pass
      And these messages arrive in the next batch:
        | producer | partition | sequence | key | amount |
        | 1        | 0         | 1        | a   | 2      |
        | 1        | 0         | 2        | b   | 3      |
      Then the aggregates are:
        | batch | key | kind | number | count |
        | 0     | a   | sum  | 2.0   | -     |
        | 3     | b   | sum  | 3.0   | -     |
      And the progress is:
        | batch | folded | duplicates | outside_window | keys |
        | 0     | 1      | 0          | 0              | 1    |
        | 1     | 1      | 0          | 0              | 1    |
        | 2     | 1      | 0          | 0              | 1    |
        | 3     | 2      | 1          | 0              | 2    |

  Rule: The five aggregates

    @OXE-R4 @OXE-R5 @OXE-R6 @OXE-R7 @OXE-R8 @OXE-R17 @OXE-R18
    Scenario Outline: Every kind over the same messages
      A key's row holds its value at the end of the batch: value is the double of sum, min
      and max and the sum of mean; count is the count of count and mean.
      Given exactly-once aggregation with a <kind> aggregate and a de-duplication window of 4 sequences
      When these messages arrive in one batch:
        | producer | partition | sequence | key | amount |
        | 1        | 0         | 1        | a   | 3      |
        | 1        | 0         | 2        | b   | 2      |
      And these messages arrive in the next batch:
        | producer | partition | sequence | key | amount |
        | 1        | 0         | 3        | a   | -1.5   |
        | 1        | 0         | 4        | a   | 4      |
      Then the aggregates are:
        | batch | key | kind   | number    | count     |
        | 0     | a   | <kind> | <a_first> | <a_n1>    |
        | 0     | b   | <kind> | <b>       | <b_n>     |
        | 1     | a   | <kind> | <a_last>  | <a_n3>    |

      Examples:
        | kind  | a_first | a_n1 | b   | b_n | a_last | a_n3 |
        | count | -       | 1    | -   | 1   | -      | 3    |
        | sum   | 3.0     | -    | 2.0 | -   | 5.5    | -    |
        | min   | 3.0     | -    | 2.0 | -   | -1.5   | -    |
        | max   | 3.0     | -    | 2.0 | -   | 4.0    | -    |
        | mean  | 3.0     | 1    | 2.0 | 1   | 5.5    | 3    |

    @OXE-R6 @OXE-R16
    Scenario: A count counts every amount, NaN and the infinities included
      Given exactly-once aggregation with a count aggregate and a de-duplication window of 8 sequences
      When these messages arrive in one batch:
        | producer | partition | sequence | key | amount      |
        | 1        | 0         | 1        | a   | "NaN"       |
        | 1        | 0         | 2        | a   | "Infinity"  |
        | 1        | 0         | 3        | a   | "-Infinity" |
        | 1        | 0         | 4        | a   | -0.0        |
        | 1        | 0         | 5        | a   | 1e308       |
      Then the aggregate values are:
        | key | kind  | number | count |
        | a   | count | -     | 5     |

    @OXE-R7 @OXE-R17
    Scenario Outline: Sum and mean add in arrival order, each addition rounded
      (0.1 + 0.2) + 0.3 is 0.6000000000000001 and (0.3 + 0.2) + 0.1 is 0.6; 1e16 + 1 rounds
      back to 1e16 (ties to even) twice, while 1 + 1 is 2 and 2 + 1e16 is representable.
      Given exactly-once aggregation with a <kind> aggregate and a de-duplication window of 8 sequences
      When these messages arrive in one batch:
        | producer | partition | sequence | key   | amount |
        | 1        | 0         | 1        | up    | 0.1    |
        | 1        | 0         | 2        | up    | 0.2    |
        | 1        | 0         | 3        | up    | 0.3    |
        | 2        | 0         | 1        | down  | 0.3    |
        | 2        | 0         | 2        | down  | 0.2    |
        | 2        | 0         | 3        | down  | 0.1    |
        | 3        | 0         | 1        | big   | 1e16   |
        | 3        | 0         | 2        | big   | 1      |
        | 3        | 0         | 3        | big   | 1      |
        | 4        | 0         | 1        | small | 1      |
        | 4        | 0         | 2        | small | 1      |
        | 4        | 0         | 3        | small | 1e16   |
      Then the aggregate values are:
        | key   | kind   | number                 | count   |
        | big   | <kind> | 1e+16                  | <count> |
        | down  | <kind> | 0.6                    | <count> |
        | small | <kind> | 1.0000000000000002e+16 | <count> |
        | up    | <kind> | 0.6000000000000001     | <count> |

      Examples:
        | kind | count |
        | sum  | -     |
        | mean | 3     |

    @OXE-R7 @OXE-R9 @OXE-R17
    Scenario: Infinities and NaN in a sum follow IEEE 754, and an overflow is an infinity
      +inf and -inf together make NaN, NaN stays, and a sum that overflowed does not come back.
      Given exactly-once aggregation with a sum aggregate and a de-duplication window of 8 sequences
      When these messages arrive in one batch:
        | producer | partition | sequence | key    | amount                 |
        | 1        | 0         | 1        | inf    | 1                      |
        | 1        | 0         | 2        | inf    | "Infinity"             |
        | 2        | 0         | 1        | cancel | "Infinity"             |
        | 2        | 0         | 2        | cancel | "-Infinity"            |
        | 2        | 0         | 3        | cancel | 5                      |
        | 3        | 0         | 1        | nan    | "NaN"                  |
        | 3        | 0         | 2        | nan    | "Infinity"             |
        | 4        | 0         | 1        | over   | 1.7976931348623157e308 |
        | 4        | 0         | 2        | over   | 1.7976931348623157e308 |
        | 5        | 0         | 1        | under  | -1e308                 |
        | 5        | 0         | 2        | under  | -1e308                 |
        | 6        | 0         | 1        | back   | 1e308                  |
        | 6        | 0         | 2        | back   | 1e308                  |
        | 6        | 0         | 3        | back   | -1e308                 |
      Then the aggregate values are:
        | key    | kind | number    |
        | back   | sum  | Infinity  |
        | cancel | sum  | NaN       |
        | inf    | sum  | Infinity  |
        | nan    | sum  | NaN       |
        | over   | sum  | Infinity  |
        | under  | sum  | -Infinity |

    @OXE-R8 @OXE-R17
    Scenario Outline: -0.0 is below 0.0 whichever arrives first, and infinities are ordinary values
      Given exactly-once aggregation with a <kind> aggregate and a de-duplication window of 8 sequences
      When these messages arrive in one batch:
        | producer | partition | sequence | key   | amount      |
        | 1        | 0         | 1        | zero1 | 0.0         |
        | 1        | 0         | 2        | zero1 | -0.0        |
        | 2        | 0         | 1        | zero2 | -0.0        |
        | 2        | 0         | 2        | zero2 | 0           |
        | 3        | 0         | 1        | edges | "Infinity"  |
        | 3        | 0         | 2        | edges | 3           |
        | 3        | 0         | 3        | edges | "-Infinity" |
      Then the aggregate values are:
        | key   | kind   | number  |
        | edges | <kind> | <edges> |
        | zero1 | <kind> | <zero>  |
        | zero2 | <kind> | <zero>  |

      Examples:
        | kind | zero | edges     |
        | min  | -0.0 | -Infinity |
        | max  | 0.0  | Infinity  |

    @OXE-R8 @OXE-R9 @OXE-R17 @OXE-R18
    Scenario Outline: A NaN makes a minimum and a maximum NaN, and it stays NaN
      Given exactly-once aggregation with a <kind> aggregate and a de-duplication window of 8 sequences
      When these messages arrive in one batch:
        | producer | partition | sequence | key | amount     |
        | 1        | 0         | 1        | n   | 1          |
        | 2        | 0         | 1        | m   | "NaN"      |
        | 2        | 0         | 2        | m   | -5         |
        | 2        | 0         | 3        | m   | "Infinity" |
      And these messages arrive in the next batch:
        | producer | partition | sequence | key | amount |
        | 1        | 0         | 2        | n   | "NaN"  |
      And these messages arrive in the next batch:
        | producer | partition | sequence | key | amount      |
        | 1        | 0         | 3        | n   | 0.5         |
        | 1        | 0         | 4        | n   | "-Infinity" |
      Then the aggregates are:
        | batch | key | kind   | number |
        | 0     | m   | <kind> | NaN   |
        | 0     | n   | <kind> | 1.0   |
        | 1     | n   | <kind> | NaN   |
        | 2     | n   | <kind> | NaN   |

      Examples:
        | kind |
        | min  |
        | max  |

    @OXE-R17 @OXE-R16
    Scenario Outline: The text of a double, and the double a JSON number is read as
      An amount is read as the double nearest to its exact decimal value; its text is the
      shortest decimal that reads back, as Python's repr writes a float.
      Given exactly-once aggregation with a max aggregate and a de-duplication window of 4 sequences
      When these messages arrive in one batch:
        | producer | partition | sequence | key | amount   |
        | 1        | 0         | 1        | a   | <amount> |
      Then the aggregate values are:
        | key | kind | number |
        | a   | max  | <text> |

      Examples:
        | amount                 | text                    |
        | 1                      | 1.0                     |
        | -0.0                   | -0.0                    |
        | -0                     | -0.0                    |
        | 1e-400                 | 0.0                     |
        | -1e-400                | -0.0                    |
        | 0.1                    | 0.1                     |
        | 1E2                    | 100.0                   |
        | 0.1e1                  | 1.0                     |
        | 123456789              | 123456789.0             |
        | 1e15                   | 1000000000000000.0      |
        | 1e16                   | 1e+16                   |
        | 100000000000000000000  | 1e+20                   |
        | 0.0001                 | 0.0001                  |
        | 0.00001                | 1e-05                   |
        | 1.5e-7                 | 1.5e-07                 |
        | -5e-324                | -5e-324                 |
        | 9007199254740993       | 9007199254740992.0      |
        | 2.0000000000000001     | 2.0                     |
        | 1.7976931348623158e308 | 1.7976931348623157e+308 |
        | "Infinity"             | Infinity                |
        | "-Infinity"            | -Infinity               |
        | "NaN"                  | NaN                     |

  Rule: Malformed items change nothing

    @OXE-R16 @OXE-R18 @TR-7
    Scenario: Each malformed message is one error row; it is not folded and its id is not remembered
      Sequence 2 is refused many times and then folded: a corrected re-delivery counts. The
      empty string is a key like any other. 1e400 is a number too large, not an infinity.
      Given exactly-once aggregation with a sum aggregate and a de-duplication window of 4 sequences
      When these messages arrive in one batch:
        | producer | partition | sequence | key | amount                 |
        | 1        | 0         | 1        | a   | 1                      |
        |          | 0         | 2        | a   | 1                      |
        | 1        |           | 2        | a   | 1                      |
        | 1        | 0         |          | a   | 1                      |
        | 1        | 0         | -1       | a   | 1                      |
        | 1        | 0         | 2        |     | 1                      |
        | 1        | 0         | 2        | a   |                        |
        | 1        | 0         | 2        | a   | null                   |
        | 1        | 0         | 2        | a   | "abc"                  |
        | 1        | 0         | 2        | a   | true                   |
        | 1        | 0         | 2        | a   | false                  |
        | 1        | 0         | 2        | a   | "nan"                  |
        | 1        | 0         | 2        | a   | "inf"                  |
        | 1        | 0         | 2        | a   | "1.5"                  |
        | 1        | 0         | 2        | a   | 1e400                  |
        | 1        | 0         | 2        | a   | -1e400                 |
        | 1        | 0         | 2        | a   | 1.7976931348623159e308 |
        | 1        | 0         | 2        | a   | 2                      |
        | 1        | 0         | 3        | ""  | 4                      |
      Then the errors are:
        | batch | seq | reason           |
        | 0     | 1   | missing_id       |
        | 0     | 2   | missing_id       |
        | 0     | 3   | missing_id       |
        | 0     | 4   | invalid_sequence |
        | 0     | 5   | missing_key      |
        | 0     | 6   | missing_amount   |
        | 0     | 7   | missing_amount   |
        | 0     | 8   | invalid_amount   |
        | 0     | 9   | invalid_amount   |
        | 0     | 10  | invalid_amount   |
        | 0     | 11  | invalid_amount   |
        | 0     | 12  | invalid_amount   |
        | 0     | 13  | invalid_amount   |
        | 0     | 14  | invalid_amount   |
        | 0     | 15  | invalid_amount   |
        | 0     | 16  | invalid_amount   |
      And the messages are:
        | seq | sequence | key | verdict |
        | 0   | 1        | a   | folded  |
        | 17  | 2        | a   | folded  |
        | 18  | 3        | ""  | folded  |
      And the aggregates are:
        | batch | key | kind | number | count |
        | 0     | ""  | sum  | 4.0   | -     |
        | 0     | a   | sum  | 3.0   | -     |
      And the progress is:
        | batch | folded | duplicates | outside_window | keys |
        | 0     | 3      | 0          | 0              | 2    |

    @OXE-R16 @TR-7 @TR-14 @TR-15
    Scenario: An item with several faults reports the first reason in the clause's order
      duplicate_seq, then unsupported_item (end and every kind but event), then missing_id,
      invalid_sequence, missing_key, missing_amount and invalid_amount. A row whose seq
      another row shares (TR-15) carries nothing the area reads.
      Given exactly-once aggregation with a sum aggregate and a de-duplication window of 4 sequences
      When these items arrive in one batch:
        | kind          | producer | partition | sequence | key | amount |
        | event         |          | 0         | -1       |     |        |
        | event         | 1        | 0         | -1       |     |        |
        | event         | 1        | 0         | 1        |     | "abc"  |
        | event         | 1        | 0         | 1        | a   |        |
        | idle          | 1        | 0         | 1        | a   | "abc"  |
        | duplicate_seq |          |           |          |     |        |
        | end           |          |           |          |     |        |
        | event         | 1        | 0         | 1        | a   | 2      |
      Then the errors are:
        | batch | seq | reason           |
        | 0     | 0   | missing_id       |
        | 0     | 1   | invalid_sequence |
        | 0     | 2   | missing_key      |
        | 0     | 3   | missing_amount   |
        | 0     | 4   | unsupported_item |
        | 0     | 5   | duplicate_seq    |
        | 0     | 6   | unsupported_item |
      And the messages are:
        | batch | seq | producer | partition | sequence | key | verdict |
        | 0     | 7   | 1        | 0         | 1        | a   | folded  |
      And the aggregate values are:
        | key | kind | number |
        | a   | sum  | 2.0   |

    @OXE-R16 @TR-14 @TR-7
    Scenario: The end of the input releases nothing and ends nothing
      Every message is judged when it arrives, so `end` has nothing to release: it is an
      unsupported item, and the messages after it are judged as before.
      Given exactly-once aggregation with a sum aggregate and a de-duplication window of 4 sequences
      When these messages arrive in one batch:
        | producer | partition | sequence | key | amount |
        | 1        | 0         | 1        | a   | 2      |
      And the input ends in the same batch
      And these messages arrive in the next batch:
        | producer | partition | sequence | key | amount |
        | 1        | 0         | 1        | a   | 2      |
        | 1        | 0         | 2        | a   | 3      |
      Then the errors are:
        | batch | seq | reason           |
        | 0     | 1   | unsupported_item |
      And the aggregates are:
        | batch | key | kind | number |
        | 0     | a   | sum  | 2.0   |
        | 1     | a   | sum  | 5.0   |
      And the progress is:
        | batch | folded | duplicates | outside_window | keys |
        | 0     | 1      | 0          | 0              | 1    |
        | 1     | 2      | 1          | 0              | 1    |

    @OXE-R15 @TR-6
    Scenario Outline: A configuration that breaks the rules is refused
      The settings are aggregate and dedup_window; the state key belongs to the object API's
      configuration, not to a trace.
      Given exactly-once aggregation configured with:
        | setting   | value   |
        | <setting> | <value> |
      Then the configuration is rejected

      Examples:
        | setting      | value   |
        | aggregate    | median  |
        | aggregate    | Sum     |
        | aggregate    | 1       |
        | aggregate    | none    |
        | aggregate    | ["sum"] |
        | dedup_window | 0       |
        | dedup_window | -1      |
        | dedup_window | 1048577 |
        | dedup_window | 1.5     |
        | dedup_window | 4.0     |
        | dedup_window | "4"     |
        | dedup_window | true    |
        | dedup_window | none    |
        | window       | 4       |
        | state_key    | "x"     |

  Rule: The object API (oracle-only)

    @oracle-only @OXE-R10 @OXE-R2 @OXE-R3
    Scenario: fold returns the key's new value, or None for a duplicate or a message outside the window
      The return value and the stats are calls of the aggregator's API, with no stream of their
      own (TR-10). The window belongs to the channel, not to the key: b's sequence 9 moves
      the channel's high, and a's sequence 3 is then outside the window of 4.
      Given an exactly-once aggregator with a sum aggregate and a de-duplication window of 4 sequences
      When these messages are folded:
        | producer | partition | sequence | key | amount |
        | 1        | 0         | 1        | a   | 1.5    |
        | 1        | 0         | 1        | a   | 1.5    |
        | 1        | 0         | 2        | a   | 2      |
        | 1        | 0         | 9        | b   | 1      |
        | 1        | 0         | 3        | a   | 1      |
      Then the folds returned:
        | sequence | key | result   |
        | 1        | a   | Sum(1.5) |
        | 1        | a   | None     |
        | 2        | a   | Sum(3.5) |
        | 9        | b   | Sum(1.0) |
        | 3        | a   | None     |
      And get returns:
        | key | value    |
        | a   | Sum(3.5) |
        | b   | Sum(1.0) |
        | c   | None     |
      And the aggregator's stats are:
        | events_folded | duplicates_filtered | outside_window | checkpoints_taken |
        | 3             | 1                   | 1              | 0                 |

    @oracle-only @OXE-R10 @OXE-R1
    Scenario: A call with a malformed argument raises ValueError and changes nothing
      The API's amount is a number (the strings "NaN", "Infinity" and "-Infinity" in this
      table stand for those doubles); a producer beyond 64 bits, a negative sequence, no key
      or an amount that is no number is refused, and the id is not remembered.
      Given an exactly-once aggregator with a mean aggregate and a de-duplication window of 4 sequences
      When these messages are folded:
        | producer    | partition | sequence | key | amount     |
        | I64_MAX + 1 | 0         | 1        | a   | 1          |
        | 1           | 0         | -1       | a   | 1          |
        | 1           | 0         | 1        |     | 1          |
        | 1           | 0         | 1        | a   | "abc"      |
        | 1           | 0         | 1        | a   | true       |
        | 1           | 0         | 1        | a   | null       |
        | 1           | 0         | 1        | a   | 1e400      |
        | 1           | 0         | 1        | a   | 2          |
        | 1           | 0         | 2        | a   | "Infinity" |
      Then the folds returned:
        | producer    | sequence | key | result                       |
        | I64_MAX + 1 | 1        | a   | ValueError                   |
        | 1           | -1       | a   | ValueError                   |
        | 1           | 1        | -   | ValueError                   |
        | 1           | 1        | a   | ValueError                   |
        | 1           | 1        | a   | ValueError                   |
        | 1           | 1        | a   | ValueError                   |
        | 1           | 1        | a   | ValueError                   |
        | 1           | 1        | a   | Mean(sum=2.0, count=1)       |
        | 1           | 2        | a   | Mean(sum=Infinity, count=2)  |
      And the aggregator's stats are:
        | events_folded | duplicates_filtered | outside_window | checkpoints_taken |
        | 2             | 0                   | 0              | 0                 |

    @oracle-only @OXE-R11
    Scenario: The aggregate state encodes its keys in the order of their UTF-8 bytes
      U+FF61 (ef bd a1) comes before U+1F600 (f0 9f 98 80) as UTF-8 bytes and as code points;
      a language that sorts UTF-16 units would put U+1F600 (d83d de00) first.
      Given an exactly-once aggregator with a count aggregate and a de-duplication window of 8 sequences
      When these messages are folded:
        | producer | partition | sequence | key | amount |
        | 1        | 0         | 1        | ｡   | 1      |
        | 1        | 0         | 2        | a   | 1      |
        | 1        | 0         | 3        | 😀  | 1      |
        | 1        | 0         | 4        | a   | 1      |
      Then the aggregate state encodes as:
        | bytes                   | meaning                  |
        | 4f 58 45 41             | the magic OXEA           |
        | 01 00                   | layout version 1         |
        | 03 00 00 00             | 3 keys                   |
        | 01 00 00 00             | key length 1             |
        | 61                      | a                        |
        | 01                      | Count                    |
        | 02 00 00 00 00 00 00 00 | 2                        |
        | 03 00 00 00             | key length 3             |
        | ef bd a1                | U+FF61                   |
        | 01                      | Count                    |
        | 01 00 00 00 00 00 00 00 | 1                        |
        | 04 00 00 00             | key length 4             |
        | f0 9f 98 80             | U+1F600                  |
        | 01                      | Count                    |
        | 01 00 00 00 00 00 00 00 | 1                        |

    @oracle-only @OXE-R11 @OXE-R7 @OXE-R8
    Scenario Outline: Each kind's payload in the aggregate state
      Given an exactly-once aggregator with a <kind> aggregate and a de-duplication window of 8 sequences
      When these messages are folded:
        | producer | partition | sequence | key | amount  |
        | 1        | 0         | 1        | k   | <first> |
        | 1        | 0         | 2        | k   | <then>  |
      Then the aggregate state encodes as:
        | bytes       | meaning          |
        | 4f 58 45 41 | the magic OXEA   |
        | 01 00       | layout version 1 |
        | 01 00 00 00 | 1 key            |
        | 01 00 00 00 | key length 1     |
        | 6b          | k                |
        | <code>      | <kind>           |
        | <payload>   | <meaning>        |

      Examples:
        | kind  | first | then | code | payload                                         | meaning                               |
        | count | 5     | 6    | 01   | 02 00 00 00 00 00 00 00                         | count 2                               |
        | sum   | 0.1   | 0.2  | 02   | 34 33 33 33 33 33 d3 3f                         | 0.30000000000000004                   |
        | min   | 0.0   | -0.0 | 03   | 00 00 00 00 00 00 00 80                         | -0.0: the sign bit                    |
        | max   | 2.5   | 1    | 04   | 00 00 00 00 00 00 04 40                         | 2.5                                   |
        | mean  | 0.1   | 0.2  | 05   | 34 33 33 33 33 33 d3 3f 02 00 00 00 00 00 00 00 | the sum 0.30000000000000004, count 2  |

    @oracle-only @OXE-R9 @OXE-R11
    Scenario Outline: Every NaN is the canonical quiet NaN, whatever its sign and payload
      A double of these bits cannot come from a trace: JSON has one spelling of NaN.
      Given an exactly-once aggregator with a <kind> aggregate and a de-duplication window of 8 sequences
      When these messages are folded:
        | producer | partition | sequence | key | amount |
        | 1        | 0         | 1        | k   | <nan>  |
      Then the folds returned:
        | result     |
        | <result>   |
      And the aggregate state encodes as:
        | bytes                   | meaning                        |
        | 4f 58 45 41             | the magic OXEA                 |
        | 01 00                   | layout version 1               |
        | 01 00 00 00             | 1 key                          |
        | 01 00 00 00             | key length 1                   |
        | 6b                      | k                              |
        | <code>                  | <kind>                         |
        | 00 00 00 00 00 00 f8 7f | NaN: the bits 7ff8000000000000 |

      Examples:
        | kind | nan                   | result   | code |
        | sum  | bits:fff8000000000000 | Sum(NaN) | 02   |
        | min  | bits:7ff0000000000001 | Min(NaN) | 03   |
        | max  | bits:fff0000000000001 | Max(NaN) | 04   |

    @oracle-only @OXE-R12 @OXE-R2
    Scenario: The de-duplication memory: channels in order, each high and its sequences inside the window
      Sequence 1 left the window (1, 5] of channel 1/0 when 5 was folded.
      Given an exactly-once aggregator with a count aggregate and a de-duplication window of 4 sequences
      When these messages are folded:
        | producer | partition | sequence | key | amount |
        | 1        | 0         | 1        | a   | 1      |
        | 1        | 0         | 2        | a   | 1      |
        | 1        | 0         | 3        | a   | 1      |
        | 1        | 0         | 5        | a   | 1      |
        | -1       | 2         | 0        | b   | 1      |
      Then the de-duplication memory encodes as:
        | bytes                   | meaning               |
        | 4f 58 45 44             | the magic OXED        |
        | 01 00                   | layout version 1      |
        | 04 00 00 00 00 00 00 00 | window 4              |
        | 02 00 00 00             | 2 channels            |
        | ff ff ff ff ff ff ff ff | producer -1           |
        | 02 00 00 00 00 00 00 00 | partition 2           |
        | 00 00 00 00 00 00 00 00 | high 0                |
        | 01 00 00 00             | 1 sequence            |
        | 00 00 00 00 00 00 00 00 | 0                     |
        | 01 00 00 00 00 00 00 00 | producer 1            |
        | 00 00 00 00 00 00 00 00 | partition 0           |
        | 05 00 00 00 00 00 00 00 | high 5                |
        | 03 00 00 00             | 3 sequences           |
        | 02 00 00 00 00 00 00 00 | 2                     |
        | 03 00 00 00 00 00 00 00 | 3                     |
        | 05 00 00 00 00 00 00 00 | 5                     |

    @oracle-only @OXE-R13
    Scenario: checkpoint writes one value: the aggregates and the memory together
      Given an exactly-once aggregator with a sum aggregate and a de-duplication window of 2 sequences
      When these messages are folded:
        | producer | partition | sequence | key | amount |
        | 1        | 0         | 1        | k   | 1      |
      And the aggregator is checkpointed
      Then the backend holds under "aggregator/state" the bytes:
        | bytes                   | meaning                     |
        | 4f 58 45 43             | the magic OXEC              |
        | 01 00                   | layout version 1            |
        | 18 00 00 00             | 24 bytes of aggregates      |
        | 4f 58 45 41             | the magic OXEA              |
        | 01 00                   | layout version 1            |
        | 01 00 00 00             | 1 key                       |
        | 01 00 00 00             | key length 1                |
        | 6b                      | k                           |
        | 02                      | Sum                         |
        | 00 00 00 00 00 00 f0 3f | 1.0                         |
        | 4f 58 45 44             | the magic OXED              |
        | 01 00                   | layout version 1            |
        | 02 00 00 00 00 00 00 00 | window 2                    |
        | 01 00 00 00             | 1 channel                   |
        | 01 00 00 00 00 00 00 00 | producer 1                  |
        | 00 00 00 00 00 00 00 00 | partition 0                 |
        | 01 00 00 00 00 00 00 00 | high 1                      |
        | 01 00 00 00             | 1 sequence                  |
        | 01 00 00 00 00 00 00 00 | 1                           |
      And the aggregator's stats are:
        | events_folded | duplicates_filtered | outside_window | checkpoints_taken |
        | 1             | 0                   | 0              | 1                 |

    @oracle-only @OXE-R13
    Scenario Outline: After a crash, the last checkpoint and the re-delivered messages give the state of a run that never crashed
      The messages after the checkpoint are lost with the process; the producer re-sends
      from before the checkpoint, and the restored memory filters what was already counted.
      Given an exactly-once aggregator with a sum aggregate and a de-duplication window of 4 sequences on <backend> state backend
      When these messages are folded:
        | producer | partition | sequence | key | amount |
        | 1        | 0         | 1        | a   | 1      |
        | 1        | 0         | 2        | a   | 2      |
      And the aggregator is checkpointed
      And these messages are folded:
        | producer | partition | sequence | key | amount |
        | 1        | 0         | 3        | a   | 4      |
        | 2        | 0         | 1        | b   | 8      |
      And the process crashes and a new aggregator restores from the same backend
      Then get returns:
        | key | value    |
        | a   | Sum(3.0) |
        | b   | None     |
      And the aggregator's stats are:
        | events_folded | duplicates_filtered | outside_window | checkpoints_taken |
        | 0             | 0                   | 0              | 0                 |
      When these messages are folded:
        | producer | partition | sequence | key | amount |
        | 1        | 0         | 2        | a   | 2      |
        | 1        | 0         | 3        | a   | 4      |
        | 2        | 0         | 1        | b   | 8      |
      Then the folds returned:
        | sequence | key | result   |
        | 2        | a   | None     |
        | 3        | a   | Sum(7.0) |
        | 1        | b   | Sum(8.0) |
      And the aggregator's stats are:
        | events_folded | duplicates_filtered | outside_window | checkpoints_taken |
        | 2             | 1                   | 0              | 0                 |
      And its state is the state of an aggregator that folded each message once:
        | producer | partition | sequence | key | amount |
        | 1        | 0         | 1        | a   | 1      |
        | 1        | 0         | 2        | a   | 2      |
        | 1        | 0         | 3        | a   | 4      |
        | 2        | 0         | 1        | b   | 8      |

      Examples:
        | backend      |
        | an in-memory |
        | a file       |

    @oracle-only @OXE-R13
    Scenario: restore with nothing stored changes nothing
      A new aggregator restoring from an empty backend is a fresh start; an aggregator that
      already folded keeps its values and its memory.
      Given an exactly-once aggregator with a sum aggregate and a de-duplication window of 4 sequences
      When these messages are folded:
        | producer | partition | sequence | key | amount |
        | 1        | 0         | 1        | a   | 1      |
      And the aggregator restores from its backend
      And these messages are folded:
        | producer | partition | sequence | key | amount |
        | 1        | 0         | 1        | a   | 1      |
      Then the folds returned:
        | sequence | key | result   |
        | 1        | a   | None     |
      And get returns:
        | key | value    |
        | a   | Sum(1.0) |
      When the process crashes and a new aggregator restores from the same backend
      Then get returns:
        | key | value |
        | a   | None  |

    @oracle-only @OXE-R13
    Scenario: A file backend keeps one file per key, named by the key's hex digits, replaced whole
      "job-7" is the bytes 6a 6f 62 2d 37. The second checkpoint replaces the first, and no
      temporary file is left beside it.
      Given an exactly-once aggregator with a count aggregate, a de-duplication window of 4 sequences and the state key "job-7" on a file state backend
      When these messages are folded:
        | producer | partition | sequence | key | amount |
        | 1        | 0         | 1        | a   | 1      |
      And the aggregator is checkpointed
      And these messages are folded:
        | producer | partition | sequence | key | amount |
        | 1        | 0         | 2        | a   | 1      |
      And the aggregator is checkpointed
      Then the backend directory holds exactly the files:
        | file       |
        | 6a6f622d37 |
      When the process crashes and a new aggregator restores from the same backend
      Then get returns:
        | key | value    |
        | a   | Count(2) |

    @oracle-only @OXE-R13 @OXE-R14 @TR-5
    Scenario Outline: A checkpoint is refused by an aggregator of another window or kind
      The memory of another window would judge re-deliveries by another rule, and values of
      another kind cannot be folded on: continuing would break the guarantee without a word.
      Given an exactly-once aggregator with a sum aggregate and a de-duplication window of 4 sequences
      When these messages are folded:
        | producer | partition | sequence | key | amount |
        | 1        | 0         | 1        | a   | 1      |
      And the aggregator is checkpointed
      And the process restarts with <settings> and restores from the same backend
      Then the call is refused with StateDecodeError naming "<named>"

      Examples:
        | settings                                                   | named        |
        | a sum aggregate and a de-duplication window of 8 sequences | dedup_window |
        | a max aggregate and a de-duplication window of 4 sequences | max          |

    @oracle-only @OXE-R14 @OXE-R11
    Scenario: decode reads exactly what encode writes
      When the bytes 4f584541 0100 02000000 01000000 61 01 0300000000000000 01000000 62 01 0100000000000000 are decoded as an aggregate state
      Then the decoded aggregate state holds:
        | key | value    |
        | a   | Count(3) |
        | b   | Count(1) |

    @oracle-only @OXE-R14 @OXE-R11 @OXE-R9
    Scenario Outline: Decoding an aggregate state refuses what encode did not write
      The valid state is 4f584541 0100 01000000 01000000 61 01 0100000000000000: key a, Count(1).
      When the bytes <bytes> are decoded as an aggregate state
      Then the call is refused with StateDecodeError naming "<named>"

      Examples:
        | bytes                                                                               | named       |
        | 4f5845                                                                              | end early   |
        | 4f584542 0100 00000000                                                              | magic       |
        | 4f584541 0200 00000000                                                              | version     |
        | 4f584541 0100 01000000 01000000 61 01 01000000000000                                | end early   |
        | 4f584541 0100 02000000 01000000 61 01 0100000000000000                              | end early   |
        | 4f584541 0100 01000000 01000000 61 01 0100000000000000 00                           | left over   |
        | 4f584541 0100 01000000 01000000 61 06 0100000000000000                              | kind        |
        | 4f584541 0100 01000000 01000000 61 00 0100000000000000                              | kind        |
        | 4f584541 0100 01000000 01000000 ff 01 0100000000000000                              | UTF-8       |
        | 4f584541 0100 02000000 01000000 62 01 0100000000000000 01000000 61 01 0100000000000000 | ascending |
        | 4f584541 0100 02000000 01000000 61 01 0100000000000000 01000000 61 01 0100000000000000 | ascending |
        | 4f584541 0100 01000000 01000000 61 01 0000000000000000                              | count 0     |
        | 4f584541 0100 01000000 01000000 61 05 000000000000f03f 0000000000000000             | count 0     |
        | 4f584541 0100 01000000 01000000 61 02 010000000000f87f                              | NaN         |

    @oracle-only @OXE-R14 @OXE-R12 @OXE-R2
    Scenario Outline: Decoding a de-duplication memory refuses what encode did not write
      The valid memory has window 4 and channel 1/0 with high 5 and sequences 3 and 5:
      4f584544 0100 0400000000000000 01000000 0100000000000000 0000000000000000 0500000000000000 02000000 0300000000000000 0500000000000000.
      When the bytes <bytes> are decoded as a de-duplication memory
      Then the call is refused with StateDecodeError naming "<named>"

      Examples:
        | bytes                                                                                                                                                                                       | named     |
        | 4f584541 0100 0400000000000000 00000000                                                                                                                                                     | magic     |
        | 4f584544 0200 0400000000000000 00000000                                                                                                                                                     | version   |
        | 4f584544 0100 0400000000000000 01000000 0100000000000000 0000000000000000 0500000000000000 02000000 0100000000000000 0500000000000000                                                       | window    |
        | 4f584544 0100 0400000000000000 01000000 0100000000000000 0000000000000000 0500000000000000 02000000 0500000000000000 0300000000000000                                                       | ascending |
        | 4f584544 0100 0400000000000000 02000000 0100000000000000 0000000000000000 0500000000000000 01000000 0500000000000000 0000000000000000 0000000000000000 0100000000000000 01000000 0100000000000000 | ascending |
        | 4f584544 0100 0400000000000000 01000000 0100000000000000 0000000000000000 0500000000000000 02000000 0300000000000000 0500000000000000 00                                                    | left over |
        | 4f584544 0100 0400000000000000 01000000 0100000000000000 0000000000000000 0500000000000000 02000000 0300000000000000                                                                        | end early |

    @oracle-only @OXE-R14 @OXE-R13
    Scenario Outline: restore refuses a damaged checkpoint and keeps the aggregator as it was
      Given an exactly-once aggregator with a count aggregate and a de-duplication window of 4 sequences
      And the backend holds under "aggregator/state" the bytes <bytes>
      When these messages are folded:
        | producer | partition | sequence | key | amount |
        | 1        | 0         | 1        | a   | 1      |
      And the aggregator restores from its backend
      Then the call is refused with StateDecodeError naming "<named>"
      And get returns:
        | key | value    |
        | a   | Count(1) |

      Examples:
        | bytes                                                                                                                                                      | named     |
        | 4f584541 0100 00000000                                                                                                                                     | magic     |
        | 4f584543 0100 ff000000 4f584541 0100 00000000                                                                                                              | end early |
        | 4f584543 0100 0a000000 4f584541 0100 00000000 4f584544 0100 0400000000000000 00000000 00                                                                  | left over |
