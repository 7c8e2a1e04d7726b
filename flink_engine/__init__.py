"""An out-of-process engine (spec/engine-protocol.md) that runs traces on Apache Flink through PyFlink."""
