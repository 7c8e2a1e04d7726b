"""Spark's own built-in event-time operators as an engine of the conformance suite
(``--engine spark-native``): see ``spark_native.engine``."""
