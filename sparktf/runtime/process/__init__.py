"""The task's processes: what one barrier task of ``sparktf.run`` / ``fit`` does and the
process that runs ``main_fn``.

``task`` is the barrier stage's function (exchange addresses, spill the partition, start
the child, relay its output); ``task_process`` starts and watches the child (its
environment, its output, its end); ``spare`` keeps a process with TensorFlow imported to
fork the next task's child from; ``child`` is that process's entry point; ``context`` is
the ``TaskContext`` ``main_fn`` receives; ``cluster`` gives roles and ``TF_CONFIG``;
``servers`` starts and awaits the parameter-server cluster's servers (and serves the ps
and worker tasks of ``sparktf.run`` for the user); ``keras_fixes`` makes Keras 3's own
``fit`` work under ``MultiWorkerMirroredStrategy``. Imports the feed, ``worker_tuning``,
``storage``, ``gpu`` and the protocol; never scoring or training.
"""
