"""What runs on the executors (internal): the barrier task (``task``), the process that runs
``main_fn`` (``child``, forked by a ``spare``), the ``TaskContext`` it receives, cluster
roles (``cluster``), the data feed (``feed``, ``row_checks``), GPUs, storage, inference
and training (``training``). Nothing here needs a SparkSession; TensorFlow is imported
only inside the task processes."""
