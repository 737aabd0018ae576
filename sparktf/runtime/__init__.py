"""What runs on the executors (internal), in rooms, each importing only the rooms below it
(import-linter contracts in ``pyproject.toml``; ``ARCHITECTURE.md`` draws them):

- ``training``: what ``TFEstimator.fit`` runs in each task's process (strategies, the
  epoch loop, checkpoints, the export). May import every room below.
- ``process``: the barrier task (``task``), the process that runs ``main_fn`` (``child``,
  forked from a ``spare``), the ``TaskContext`` it receives (``context``), cluster roles
  and ``TF_CONFIG`` (``cluster``), the parameter servers' handle (``servers``).
- ``scoring``: ``TFModel.transform``'s Arrow UDF (``inference``), the SavedModels it loads
  (``saved_models``), how rows become calls (``batching``, ``length_groups``, ``padding``)
  and outputs become columns (``outputs``). Never imports ``process`` or ``training``.
- ``feed``: the rows on their way in: spilled Arrow shards (``shards``), each column kind
  (``columns``), model inputs (``tensors``), the rows' arrival while they spill
  (``arrival``), row checks (``row_checks``). Imports no room but ``worker_tuning``.
- ``worker_tuning``: what sparktf changes inside Spark's Python workers, each switched off
  by ``spark.sparktf.workerTuning=false``. Imports no other room.

Shared by every room: ``storage`` (local, HDFS and object-store paths) and ``gpu`` (which
GPU a task was given). Nothing here needs a SparkSession; TensorFlow is imported only
inside the task processes and the scoring workers.
"""
