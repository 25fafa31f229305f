"""The Spark pipeline: the ``headwater`` data source, typed table views, transforms and the
pipeline runner. Change rows have the schema of :mod:`headwater.spark.schema`."""
