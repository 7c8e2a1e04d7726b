@OXW @watermark_propagation
Feature: Watermark generation, alignment and propagation
  A generator turns a source's events into its watermark, an aligner takes the
  minimum over sources, and a propagator carries watermarks through an acyclic
  graph of operators, each emitting the minimum of its upstreams, to the sinks.
  Clauses: spec/watermark_propagation.md.

  The graph is configuration (`nodes`, `edges` as JSON lists); the sources are
  the nodes without upstreams. An item names its node in the `key` column: an
  `event` of a source feeds that source's generator, a `watermark` item sets
  the source's watermark directly. Times are milliseconds; each When step is
  one new batch (see harness/steps.py); "-" in an expected table is null.

  Rule: The generator

    @OXW-R1 @OXW-R2 @OXW-R18
    Scenario: A watermark every third event, from the largest event time so far
      Late events count like any other: the sixth event emits again.
      Given watermark propagation configured with:
        | setting             | value   |
        | nodes               | ["src"] |
        | edges               | []      |
        | advance_threshold   | 3       |
        | max_out_of_order_ms | 1000    |
      When these items arrive in one batch:
        | kind  | key | event_time |
        | event | src | 5000       |
        | event | src | 7000       |
        | event | src | 6000       |
        | event | src | 9000       |
        | event | src | 2000       |
        | event | src | 8000       |
      Then the generated table is:
        | batch | seq | key | watermark |
        | 0     | 2   | src | 6000      |
        | 0     | 5   | src | 8000      |
      And the watermarks table is:
        | batch | seq | key | watermark |
        | 0     | 2   | src | 6000      |
        | 0     | 5   | src | 8000      |
      And there are no errors

    @OXW-R2 @OXW-R7 @OXW-R16 @OXW-R18
    Scenario: Nothing is emitted before the threshold-th event, and the first emission counts every event before it
      Given watermark propagation configured with:
        | setting             | value   |
        | nodes               | ["src"] |
        | edges               | []      |
        | advance_threshold   | 2       |
        | max_out_of_order_ms | 500     |
      When these items arrive in one batch:
        | kind  | key | event_time |
        | event | src | 4000       |
      Then the generated table is empty
      And the watermarks table is empty
      And the progress table is:
        | batch | aligned_watermark | global_watermark | violation_count |
        | 0     | I64_MIN           | I64_MIN          | 0               |
      When these items arrive in the next batch:
        | kind  | key | event_time |
        | event | src | 3000       |
      Then the generated table is:
        | batch | seq | key | watermark |
        | 1     | 0   | src | 3500      |
      And the progress table is:
        | batch | aligned_watermark | global_watermark | violation_count |
        | 0     | I64_MIN           | I64_MIN          | 0               |
        | 1     | 3500              | 3500             | 0               |

    @OXW-R3 @OXW-R12 @OXW-R18
    Scenario: A generator repeats its watermark but never goes back
      Every event emits; events below the maximum repeat the last value, which
      is reported as generated but changes no operator and is no violation.
      Given watermark propagation configured with:
        | setting | value                |
        | nodes   | ["src", "sink"]      |
        | edges   | [["src", "sink"]]    |
      When these items arrive in one batch:
        | kind  | key | event_time |
        | event | src | 5000       |
        | event | src | 4000       |
        | event | src | 5000       |
        | event | src | 6000       |
      Then the generated table is:
        | batch | seq | key | watermark |
        | 0     | 0   | src | 5000      |
        | 0     | 1   | src | 5000      |
        | 0     | 2   | src | 5000      |
        | 0     | 3   | src | 6000      |
      And the watermarks table is:
        | batch | seq | key  | watermark |
        | 0     | 0   | src  | 5000      |
        | 0     | 0   | sink | 5000      |
        | 0     | 3   | src  | 6000      |
        | 0     | 3   | sink | 6000      |
      And the violations table is empty

    @OXW-R1 @OXW-R4 @OXW-R13
    Scenario: Each source's generator counts its own events
      Given watermark propagation configured with:
        | setting             | value                        |
        | nodes               | ["a", "b", "join"]           |
        | edges               | [["a", "join"], ["b", "join"]] |
        | advance_threshold   | 2                            |
        | max_out_of_order_ms | 100                          |
      When these items arrive in one batch:
        | kind  | key | event_time |
        | event | a   | 1000       |
        | event | b   | 2000       |
        | event | a   | 1500       |
        | event | b   | 500        |
      Then the generated table is:
        | batch | seq | key | watermark |
        | 0     | 2   | a   | 1400      |
        | 0     | 3   | b   | 1900      |
      And the watermarks table is:
        | batch | seq | key  | watermark |
        | 0     | 2   | a    | 1400      |
        | 0     | 3   | b    | 1900      |
        | 0     | 3   | join | 1400      |

    @OXW-R2 @TR-2
    Scenario: A generated watermark saturates at the lower bound of time
      Given watermark propagation configured with:
        | setting             | value   |
        | nodes               | ["src"] |
        | edges               | []      |
        | max_out_of_order_ms | 1000    |
      When these items arrive in one batch:
        | kind  | key | event_time  |
        | event | src | I64_MIN + 10 |
        | event | src | -5000       |
      Then the generated table is:
        | batch | seq | key | watermark |
        | 0     | 0   | src | I64_MIN   |
        | 0     | 1   | src | -6000     |
      And the progress table is:
        | batch | aligned_watermark | global_watermark |
        | 0     | -6000             | -6000            |

    @OXW-R2 @OXW-R19 @TR-5
    Scenario Outline: A generator's count and maximum continue across a restart
      Given watermark propagation configured with:
        | setting           | value   |
        | nodes             | ["src"] |
        | edges             | []      |
        | advance_threshold | 3       |
      When these items arrive in one batch:
        | kind  | key | event_time |
        | event | src | 9000       |
        | event | src | 1000       |
      And the engine <action>
      And these items arrive in the next batch:
        | kind  | key | event_time |
        | event | src | 2000       |
      Then the generated table is:
        | batch | seq | key | watermark |
        | 1     | 0   | src | 9000      |

      Examples:
        | action                       |
        | restarts from its checkpoint |
        | keeps running                |

  Rule: The aligner

    @OXW-R5 @OXW-R8 @OXW-R16
    Scenario: The aligned watermark is the minimum over the sources
      Three nodes without edges: each is a source and a sink.
      Given watermark propagation configured with:
        | setting | value           |
        | nodes   | ["a", "b", "c"] |
        | edges   | []              |
      When these items arrive in one batch:
        | kind      | key | time |
        | watermark | a   | 5000 |
        | watermark | b   | 3000 |
        | watermark | c   | 9000 |
      And these items arrive in the next batch:
        | kind      | key | time |
        | watermark | b   | 4000 |
      Then the progress table is:
        | batch | aligned_watermark | global_watermark |
        | 0     | 3000              | 3000             |
        | 1     | 4000              | 4000             |

    @OXW-R6 @OXW-R16 @OXW-R18 @TR-5
    Scenario: With no sources the aligned and global watermarks are I64_MIN
      Given watermark propagation configured with:
        | setting | value |
        | nodes   | []    |
        | edges   | []    |
      When 2 empty batches pass
      Then the progress table is:
        | batch | aligned_watermark | global_watermark | violation_count |
        | 0     | I64_MIN           | I64_MIN          | 0               |
        | 1     | I64_MIN           | I64_MIN          | 0               |

    @OXW-R7 @OXW-R8
    Scenario: A source without a watermark holds the aligned watermark at I64_MIN
      Given watermark propagation configured with:
        | setting | value      |
        | nodes   | ["a", "b"] |
        | edges   | []         |
      When these items arrive in one batch:
        | kind      | key | time  |
        | watermark | a   | 5000  |
      And these items arrive in the next batch:
        | kind      | key | time |
        | watermark | b   | 100  |
      Then the progress table is:
        | batch | aligned_watermark | global_watermark |
        | 0     | I64_MIN           | I64_MIN          |
        | 1     | 100               | 100              |

  Rule: Propagation through the operator graph

    @OXW-R9 @OXW-R13 @OXW-R14 @OXW-R15 @OXW-R16 @OXW-R18
    Scenario: The seed's pipeline: src, map, filter and another source into a join, then a sink
      Given watermark propagation configured with:
        | setting | value                                                                                                 |
        | nodes   | ["src", "map", "filter", "join", "sink", "another_src"]                                               |
        | edges   | [["src", "map"], ["map", "filter"], ["filter", "join"], ["join", "sink"], ["another_src", "join"]]    |
      When these items arrive in one batch:
        | kind      | key         | time  |
        | watermark | src         | 10000 |
      Then the watermarks table is:
        | batch | seq | key    | watermark |
        | 0     | 0   | src    | 10000     |
        | 0     | 0   | map    | 10000     |
        | 0     | 0   | filter | 10000     |
      And the progress table is:
        | batch | aligned_watermark | global_watermark |
        | 0     | I64_MIN           | I64_MIN          |
      When these items arrive in the next batch:
        | kind      | key         | time  |
        | watermark | another_src | 7000  |
        | watermark | src         | 12000 |
        | watermark | another_src | 15000 |
      Then the watermarks table is:
        | batch | seq | key         | watermark |
        | 0     | 0   | src         | 10000     |
        | 0     | 0   | map         | 10000     |
        | 0     | 0   | filter      | 10000     |
        | 1     | 0   | another_src | 7000      |
        | 1     | 0   | join        | 7000      |
        | 1     | 0   | sink        | 7000      |
        | 1     | 1   | src         | 12000     |
        | 1     | 1   | map         | 12000     |
        | 1     | 1   | filter      | 12000     |
        | 1     | 2   | another_src | 15000     |
        | 1     | 2   | join        | 12000     |
        | 1     | 2   | sink        | 12000     |
      And the progress table is:
        | batch | aligned_watermark | global_watermark |
        | 0     | I64_MIN           | I64_MIN          |
        | 1     | 12000             | 12000            |
      And there are no errors

    @OXW-R13 @OXW-R15
    Scenario: An operator with several upstreams emits their minimum, and only when it changes
      A diamond: a feeds b and c, x feeds c too, and b and c meet in d.
      Given watermark propagation configured with:
        | setting | value                                                  |
        | nodes   | ["a", "x", "b", "c", "d"]                              |
        | edges   | [["a", "b"], ["a", "c"], ["x", "c"], ["b", "d"], ["c", "d"]] |
      When these items arrive in one batch:
        | kind      | key | time |
        | watermark | x   | 3000 |
        | watermark | a   | 5000 |
        | watermark | a   | 6000 |
        | watermark | x   | 8000 |
      Then the watermarks table is:
        | batch | seq | key | watermark |
        | 0     | 0   | x   | 3000      |
        | 0     | 1   | a   | 5000      |
        | 0     | 1   | b   | 5000      |
        | 0     | 1   | c   | 3000      |
        | 0     | 1   | d   | 3000      |
        | 0     | 2   | a   | 6000      |
        | 0     | 2   | b   | 6000      |
        | 0     | 3   | x   | 8000      |
        | 0     | 3   | c   | 6000      |
        | 0     | 3   | d   | 6000      |

    @OXW-R14
    Scenario: An operator emits nothing until its last silent upstream emits
      Given watermark propagation configured with:
        | setting | value                          |
        | nodes   | ["a", "b", "join"]             |
        | edges   | [["a", "join"], ["b", "join"]] |
      When these items arrive in one batch:
        | kind      | key | time |
        | watermark | a   | 100  |
        | watermark | a   | 200  |
      Then the watermarks table is:
        | batch | seq | key | watermark |
        | 0     | 0   | a   | 100       |
        | 0     | 1   | a   | 200       |
      When these items arrive in the next batch:
        | kind      | key | time |
        | watermark | b   | 50   |
      Then the watermarks table is:
        | batch | seq | key  | watermark |
        | 0     | 0   | a    | 100       |
        | 0     | 1   | a    | 200       |
        | 1     | 0   | b    | 50        |
        | 1     | 0   | join | 50        |

    @OXW-R16
    Scenario: The global watermark is the minimum over the sinks, held while a sink is silent
      Given watermark propagation configured with:
        | setting | value                          |
        | nodes   | ["a", "b", "s1", "s2"]         |
        | edges   | [["a", "s1"], ["b", "s2"], ["a", "s2"]] |
      When these items arrive in one batch:
        | kind      | key | time |
        | watermark | a   | 100  |
      And these items arrive in the next batch:
        | kind      | key | time |
        | watermark | b   | 300  |
      And these items arrive in the next batch:
        | kind      | key | time |
        | watermark | a   | 500  |
      Then the progress table is:
        | batch | aligned_watermark | global_watermark |
        | 0     | I64_MIN           | I64_MIN          |
        | 1     | 100               | 100              |
        | 2     | 300               | 300              |
      And the watermarks table is:
        | batch | seq | key | watermark |
        | 0     | 0   | a   | 100       |
        | 0     | 0   | s1  | 100       |
        | 1     | 0   | b   | 300       |
        | 1     | 0   | s2  | 100       |
        | 2     | 0   | a   | 500       |
        | 2     | 0   | s1  | 500       |
        | 2     | 0   | s2  | 300       |

  Rule: Violations

    @OXW-R12 @OXW-R18
    Scenario: A regression raises a violation naming the source and changes nothing
      Given watermark propagation configured with:
        | setting | value             |
        | nodes   | ["src", "sink"]   |
        | edges   | [["src", "sink"]] |
      When these items arrive in one batch:
        | kind      | key | time |
        | watermark | src | 5000 |
        | watermark | src | 3000 |
        | watermark | src | 5000 |
      And these items arrive in the next batch:
        | kind      | key | time |
        | watermark | src | 4000 |
        | watermark | src | 7000 |
      Then the violations table is:
        | batch | seq | key | watermark | reason     |
        | 0     | 1   | src | 3000      | regression |
        | 1     | 0   | src | 4000      | regression |
      And the watermarks table is:
        | batch | seq | key  | watermark |
        | 0     | 0   | src  | 5000      |
        | 0     | 0   | sink | 5000      |
        | 1     | 1   | src  | 7000      |
        | 1     | 1   | sink | 7000      |
      And the progress table is:
        | batch | aligned_watermark | global_watermark | violation_count |
        | 0     | 5000              | 5000             | 1               |
        | 1     | 7000              | 7000             | 2               |
      And there are no errors

    @OXW-R11 @OXW-R12
    Scenario: A generated watermark below a directly reported one is a violation
      Given watermark propagation configured with:
        | setting | value             |
        | nodes   | ["src", "sink"]   |
        | edges   | [["src", "sink"]] |
      When these items arrive in one batch:
        | kind      | key | time  | event_time |
        | watermark | src | 10000 |            |
        | event     | src |       | 5000       |
        | event     | src |       | 12000      |
      Then the generated table is:
        | batch | seq | key | watermark |
        | 0     | 1   | src | 5000      |
        | 0     | 2   | src | 12000     |
      And the violations table is:
        | batch | seq | key | watermark | reason     |
        | 0     | 1   | src | 5000      | regression |
      And the watermarks table is:
        | batch | seq | key  | watermark |
        | 0     | 0   | src  | 10000     |
        | 0     | 0   | sink | 10000     |
        | 0     | 2   | src  | 12000     |
        | 0     | 2   | sink | 12000     |

  Rule: Refused items and configurations

    @OXW-R11 @OXW-R17 @TR-7
    Scenario: Malformed items are error rows and change nothing
      Given watermark propagation configured with:
        | setting | value             |
        | nodes   | ["src", "sink"]   |
        | edges   | [["src", "sink"]] |
      When these items arrive in one batch:
        | kind      | key   | time | event_time |
        | watermark | sink  | 100  |            |
        | event     | sink  |      | 100        |
        | watermark | other | 100  |            |
        | watermark |       | 100  |            |
        | clock     |       | 100  |            |
        | watermark | src   |      |            |
        | event     | src   |      |            |
        | watermark | other |      |            |
        | watermark | src   | 700  |            |
      Then the errors are:
        | batch | seq | reason             |
        | 0     | 0   | not_a_source       |
        | 0     | 1   | not_a_source       |
        | 0     | 2   | unknown_operator   |
        | 0     | 3   | missing_key        |
        | 0     | 4   | unsupported_item   |
        | 0     | 5   | missing_time       |
        | 0     | 6   | missing_event_time |
        | 0     | 7   | unknown_operator   |
      And the watermarks table is:
        | batch | seq | key  | watermark |
        | 0     | 8   | src  | 700       |
        | 0     | 8   | sink | 700       |
      And the generated table is empty

    @TR-15 @OXW-R17 @TR-7
    Scenario: Every row of a repeated seq is a duplicate_seq error row and propagates nothing
      The table's rows at seq 1 were two watermarks of src: both are error rows, so only the
      watermarks before and after them reach the graph.
      Given watermark propagation configured with:
        | setting | value             |
        | nodes   | ["src", "sink"]   |
        | edges   | [["src", "sink"]] |
      When these items arrive in one batch:
        | kind          | key | time |
        | watermark     | src | 100  |
        | duplicate_seq |     |      |
        | duplicate_seq |     |      |
        | watermark     | src | 700  |
      Then the errors are:
        | batch | seq | reason        |
        | 0     | 1   | duplicate_seq |
        | 0     | 2   | duplicate_seq |
      And the watermarks table is:
        | batch | seq | key  | watermark |
        | 0     | 0   | src  | 100       |
        | 0     | 0   | sink | 100       |
        | 0     | 3   | src  | 700       |
        | 0     | 3   | sink | 700       |

    @OXW-R17 @TR-14 @TR-7
    Scenario: The end of the input is not an item of this area, and the stream goes on
      The area holds no data and a source's final watermark is a watermark item, so an
      end item is unsupported_item and the watermark after it still propagates.
      Given watermark propagation configured with:
        | setting | value             |
        | nodes   | ["src", "sink"]   |
        | edges   | [["src", "sink"]] |
      When these items arrive in one batch:
        | kind      | key | time |
        | watermark | src | 100  |
        | end       |     |      |
        | watermark | src | 700  |
      Then the errors are:
        | batch | seq | reason           |
        | 0     | 1   | unsupported_item |
      And the watermarks table is:
        | batch | seq | key  | watermark |
        | 0     | 0   | src  | 100       |
        | 0     | 0   | sink | 100       |
        | 0     | 2   | src  | 700       |
        | 0     | 2   | sink | 700       |

    @OXW-R10 @TR-6
    Scenario Outline: A graph with a cycle is refused when it is built
      Given watermark propagation configured with:
        | setting | value     |
        | nodes   | ["a", "b", "c"] |
        | edges   | <edges>   |
      When these items arrive in one batch:
        | kind      | key | time |
        | watermark | a   | 1    |
      Then the configuration is rejected

      Examples:
        | edges                                  |
        | [["a", "b"], ["b", "c"], ["c", "b"]]   |
        | [["a", "a"]]                           |
        | [["a", "b"], ["b", "c"], ["c", "a"]]   |

    @OXW-R4 @OXW-R9 @OXW-R20 @TR-6
    Scenario Outline: A bad setting or a malformed graph is refused before any item
      Given watermark propagation configured with:
        | setting   | value             |
        | nodes     | ["a", "b"]        |
        | edges     | [["a", "b"]]      |
        | <setting> | <value>           |
      When these items arrive in one batch:
        | kind      | key | time |
        | watermark | a   | 1    |
      Then the configuration is rejected

      Examples:
        | setting             | value                        |
        | advance_threshold   | 0                            |
        | advance_threshold   | true                         |
        | max_out_of_order_ms | -1                           |
        | max_out_of_order_ms | 1.5                          |
        | bounded_delay       | 10                           |
        | nodes               | "a"                          |
        | nodes               | ["a", "a"]                   |
        | nodes               | ["a", ""]                    |
        | nodes               | none                         |
        | edges               | [["a"]]                      |
        | edges               | [["a", "x"]]                 |
        | edges               | [["a", "b"], ["a", "b"]]     |
        | edges               | none                         |

    @OXW-R20 @TR-6
    Scenario: The graph is required
      Given watermark propagation configured with:
        | setting           | value |
        | advance_threshold | 2     |
      When an empty batch passes
      Then the configuration is rejected

  Rule: Batches and restarts

    @OXW-R18 @TR-5
    Scenario: Every batch reports its progress, empty batches included
      Given watermark propagation configured with:
        | setting | value   |
        | nodes   | ["src"] |
        | edges   | []      |
      When an empty batch passes
      And these items arrive in the next batch:
        | kind      | key | time |
        | watermark | src | 42   |
      And an empty batch passes
      Then the progress table is:
        | batch | aligned_watermark | global_watermark | violation_count |
        | 0     | I64_MIN           | I64_MIN          | 0               |
        | 1     | 42                | 42               | 0               |
        | 2     | 42                | 42               | 0               |

    @OXW-R12 @OXW-R19 @TR-5
    Scenario Outline: A restart keeps the last emitted watermarks, generators and the violation count
      Given watermark propagation configured with:
        | setting             | value                          |
        | nodes               | ["a", "b", "join"]             |
        | edges               | [["a", "join"], ["b", "join"]] |
        | advance_threshold   | 2                              |
        | max_out_of_order_ms | 10                             |
      When these items arrive in one batch:
        | kind      | key | time | event_time |
        | watermark | a   | 500  |            |
        | watermark | a   | 400  |            |
        | event     | b   |      | 900        |
      And the engine <action>
      And these items arrive in the next batch:
        | kind      | key | time | event_time |
        | watermark | a   | 450  |            |
        | event     | b   |      | 300        |
        | watermark | a   | 600  |            |
      Then the violations table is:
        | batch | seq | key | watermark | reason     |
        | 0     | 1   | a   | 400       | regression |
        | 1     | 0   | a   | 450       | regression |
      And the watermarks table is:
        | batch | seq | key  | watermark |
        | 0     | 0   | a    | 500       |
        | 1     | 1   | b    | 890       |
        | 1     | 1   | join | 500       |
        | 1     | 2   | a    | 600       |
        | 1     | 2   | join | 600       |
      And the progress table is:
        | batch | aligned_watermark | global_watermark | violation_count |
        | 0     | I64_MIN           | I64_MIN          | 1               |
        | 1     | 600               | 600              | 2               |

      Examples:
        | action                       |
        | restarts from its checkpoint |
        | keeps running                |

    @OXW-R21 @OXW-R2 @OXW-R12 @OXW-R13 @OXW-R18 @OXW-R19 @TR-5
    Scenario: The same items cut after the first and the fifth, with an empty batch between, give the same rows renumbered
      The items of the restart scenario above, cut into four batches instead of two and
      restarted after the second. Each item is judged as before, against what the items before
      it left: 400 and 450 are regressions against a's 500, wherever the batch starts; b's
      generator emits at its second event, 300, the largest time so far 900 minus 10; join
      gets 500 then 600. Only the batch and seq change: 400 was (0, 1), now (1, 0); the
      emission at 300 was (1, 1), now (1, 3); 600 was (1, 2), now (3, 0). Progress after all
      six items is the two-batch run's last row. The rows after one item, after five and after
      the empty batch are new; the two-batch run's row after three items (I64_MIN, I64_MIN,
      one violation) has no counterpart here.
      Given watermark propagation configured with:
        | setting             | value                          |
        | nodes               | ["a", "b", "join"]             |
        | edges               | [["a", "join"], ["b", "join"]] |
        | advance_threshold   | 2                              |
        | max_out_of_order_ms | 10                             |
      When these items arrive in one batch:
        | kind      | key | time | event_time |
        | watermark | a   | 500  |            |
      And these items arrive in the next batch:
        | kind      | key | time | event_time |
        | watermark | a   | 400  |            |
        | event     | b   |      | 900        |
        | watermark | a   | 450  |            |
        | event     | b   |      | 300        |
      And the engine restarts from its checkpoint
      And an empty batch passes
      And these items arrive in the next batch:
        | kind      | key | time | event_time |
        | watermark | a   | 600  |            |
      Then the generated table is:
        | batch | seq | key | watermark |
        | 1     | 3   | b   | 890       |
      And the violations table is:
        | batch | seq | key | watermark | reason     |
        | 1     | 0   | a   | 400       | regression |
        | 1     | 2   | a   | 450       | regression |
      And the watermarks table is:
        | batch | seq | key  | watermark |
        | 0     | 0   | a    | 500       |
        | 1     | 3   | b    | 890       |
        | 1     | 3   | join | 500       |
        | 3     | 0   | a    | 600       |
        | 3     | 0   | join | 600       |
      And the progress table is:
        | batch | aligned_watermark | global_watermark | violation_count |
        | 0     | I64_MIN           | I64_MIN          | 0               |
        | 1     | 500               | 500              | 2               |
        | 2     | 500               | 500              | 2               |
        | 3     | 600               | 600              | 2               |
      And there are no errors
