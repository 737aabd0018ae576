"""The feed: a partition's rows from Spark's Arrow batches to the model's inputs.

``shards`` spills a partition to a local Arrow file and reads it back in steps;
``columns`` knows each column kind (as spilled, as numpy, ``Padded`` rows); ``tensors``
shapes numpy values into what a model input declares; ``arrival`` follows the rows while
they are still being written (a task's process starts before its partition has arrived);
``row_checks`` refuses bad rows before training. The feed knows nothing of processes,
scoring or training: it imports ``storage`` and nothing else of the runtime.
"""
