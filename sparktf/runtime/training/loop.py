"""The parts of a fit every training strategy shares: the compiled model built and resumed
from its last checkpoint, the epochs in the order of Keras's ``fit`` (``EpochRunner``),
Keras's validation pass, the export and the chief's answer to the driver."""

from __future__ import annotations

import collections
import json
import os
import re
import tempfile
import time

import numpy as np

from sparktf._protocol import heartbeats
from sparktf.runtime import feed, inference, storage
from sparktf.runtime.training import best, checkpoint, file_callbacks, keras_steps, summaries
from sparktf.runtime.training import bindings as binding
from sparktf.runtime.training.spec import EXPORT_DIR, KERAS_FILE, SAVED_MODEL, StepPlan, TrainSpec


def resume(model, spec: TrainSpec) -> tuple[int, dict]:
    """(first epoch, history so far): from the last checkpoint of this fit, if any."""
    found = checkpoint.latest(spec.model_dir)
    if not found:
        return 0, {}
    checkpoint.restore(model, spec.model_dir, found)
    print(f"sparktf: resuming after epoch {found['epoch']} from the last checkpoint",
          flush=True)
    return found["epoch"], found["history"]


def chief_result(model, spec: TrainSpec, ctx, history: dict,
                 bound: binding.Bindings) -> dict | None:
    """Exports the trained model; the chief's answer to the driver (None elsewhere)."""
    with heartbeats.Heartbeat(ctx).during("exporting", spec.epochs):
        inputs = _named_specs(bound.x_template(feed.empty_batch(spec.columns, ctx.feedSpec)),
                              [b.name for b in bound.inputs])
        exported, signature_inputs = _export(model, spec, ctx, inputs)
    ctx.phase("exported")
    if not ctx.isChief:
        return None
    kind, from_logits = keras_steps.prediction_kind(model)
    return {"history": history, "export_dir": exported, "rows": int(sum(ctx.allNumRows)),
            "input_mapping": _signature_mapping(signature_inputs, bound),
            "prediction_kind": kind, "from_logits": from_logits}


def build_model(spec: TrainSpec, feed_spec: dict):
    """The user's compiled model with every variable created (under the current scope):
    its layers', its metrics' and its optimizer's, as Keras's ``fit`` creates them; and
    its ``Bindings`` (which column feeds which input), checked against the columns."""
    model = spec.model_fn(dict(spec.hparams))
    keras_steps.check_compiled(model)
    bound = binding.bind(model, spec.feature_columns, spec.label_columns, feed_spec,
                         spec.spark_types, spec.missing_features)
    if keras_steps.is_tf_keras(model):
        model.optimizer.build(model.trainable_variables)
    else:
        keras_steps.build(model, spec.template(feed_spec, bound))
    return model, bound


def check_labels(model, spec: TrainSpec, ctx) -> None:
    """Refuses class labels outside the model's outputs before the first step."""
    if len(spec.label_columns) != 1:
        return
    lows, highs, integral = [], [], True
    for shard in (ctx.shard, ctx.validationShard):
        if shard is None or not shard.num_rows:
            continue
        for chunk in feed.read_chunks(shard, [spec.label_column]):
            labels = chunk[spec.label_column]
            if not isinstance(labels, np.ndarray) or labels.ndim != 1 or not len(labels):
                return  # array labels (of any length): nothing to index
            lows.append(float(labels.min()))
            highs.append(float(labels.max()))
            integral &= bool(np.all(np.mod(labels, 1) == 0))
    if lows:
        keras_steps.check_class_labels(model, min(lows), max(highs), integral,
                                       spec.label_column)


class EpochRunner:
    """The epochs of a fit, in the order of Keras's ``fit``: train, validate, callbacks,
    history; plus sparktf's summaries, checkpoint and progress after each epoch.
    Subclasses say how one epoch trains (``train_epoch``) and validates."""

    def __init__(self, spec: TrainSpec, ctx, model, steps: int, beat=None):
        self.spec, self.ctx, self.model, self.steps = spec, ctx, model, steps
        self.beat = beat or heartbeats.Heartbeat(ctx)
        self.summaries = summaries.EpochSummaries(spec.model_dir, ctx.isChief,
                                                  spec.summary_steps)
        self.recorder = _EpochLogs()
        self.callbacks = callback_list([*spec.callbacks, self.recorder], model, spec.epochs,
                                       steps)
        self.rows_trained = 0  # in the last epoch, over all workers
        self.epoch = 0  # the epoch running (0-based)
        self.best = None
        if spec.keep_best:
            self.best = best.keep_best(spec.keep_best, spec.keep_best_mode)
            self.best.set_model(model)

    def train_epoch(self, epoch: int) -> dict[str, float]:
        raise NotImplementedError

    def validates(self) -> bool:
        return False

    def validate(self) -> dict[str, float]:
        return {}

    def validation_step(self, step: int) -> None:
        """After each validation step: a heartbeat, at most every few seconds."""
        self.beat("validation", self.epoch + 1, step, force=False)

    def agree_to_stop(self) -> bool:
        """Whether training stops now: ``model.stop_training`` as every worker sees it."""
        return bool(getattr(self.model, "stop_training", False))

    def fit(self, first_epoch: int = 0, history: dict | None = None) -> dict[str, list[float]]:
        """Runs epochs ``first_epoch`` .. ``epochs - 1``, checkpointing after each one."""
        history = collections.defaultdict(list, {k: list(v) for k, v in (history or {}).items()})
        self.model.stop_training = False
        if first_epoch:
            file_callbacks.resume(self.spec.callbacks, history)
        self.callbacks.on_train_begin()
        logs: dict = {}
        for epoch in range(first_epoch, self.spec.epochs):
            self.epoch = epoch
            started = time.monotonic()
            self.model.reset_metrics()
            self.callbacks.on_epoch_begin(epoch)
            logs = self.train_epoch(epoch)
            if self.validates():
                self.beat("validation", epoch + 1)
                logs.update(self.validate())
            self.beat("callbacks", epoch + 1)
            self.callbacks.on_epoch_end(epoch, logs)
            logs = self.recorder.logs  # as the callbacks left them (e.g. + learning_rate)
            for key, value in logs.items():
                history[key].append(value)
            if self.best is not None:
                self.best.on_epoch_end(epoch, logs)
            self.summaries.write(epoch + 1, logs)
            self.beat("checkpoint", epoch + 1)
            checkpoint.save(self.model, self.spec.model_dir, epoch + 1, dict(history),
                            self.ctx.isChief, prune_older=not self.spec.evaluator)
            heartbeats.report_epoch(self.ctx, epoch + 1, self.spec.epochs, logs, self.rows_trained,
                                 time.monotonic() - started)
            if self.agree_to_stop():
                break
        _finalize(self.model)
        self.callbacks.on_train_end(logs)
        if self.best is not None:  # after the callbacks, as EarlyStopping restores its own
            self.best.restore(history)
        self.summaries.close()
        return dict(history)


class _EpochLogs:
    """Last in the callback list, like Keras's History: the epoch's logs as the other
    callbacks left them (``CallbackList`` hands them a copy of the loop's logs)."""

    def __new__(cls):
        import keras

        class EpochLogs(keras.callbacks.Callback):
            logs: dict = {}

            def on_epoch_end(self, epoch, logs=None):
                self.logs = dict(logs or {})

        return EpochLogs()


def _finalize(model) -> None:
    """What Keras's ``fit`` does after the last epoch: e.g. an EMA optimizer's averages
    become the weights."""
    import keras

    if isinstance(model.optimizer, keras.optimizers.Optimizer):
        model.optimizer.finalize_variable_values(model.trainable_weights)


def features(data: tuple) -> tuple:
    x = data[0]
    return x if isinstance(x, tuple) else (x,)


class ValidationPass:
    """Keras's ``evaluate`` inside ``fit``: ``test_step`` over the validation rows, then
    the metrics over every worker, ``val_`` prefixed."""

    def __init__(self, steps_fn, spec: TrainSpec, shard: feed.Shard, plan: StepPlan,
                 callbacks, bound: binding.Bindings, infos: dict):
        self.steps_fn, self.spec, self.shard, self.plan = steps_fn, spec, shard, plan
        self.callbacks = callbacks
        self.hooks = keras_steps.overrides(spec.callbacks, keras_steps.TEST_BATCH_HOOKS)
        self.bound, self.infos = bound, infos

    def run(self, progress=None) -> dict[str, float]:
        """``progress(step)`` is called after each step (heartbeats)."""
        model = self.steps_fn.model
        model.reset_metrics()
        self.callbacks.on_test_begin()
        logs: dict = {}
        shares = self.plan.shares
        for step, data in enumerate(self.spec.batches(self.shard, self.plan.sizes, self.bound,
                                                      infos=self.infos, stand_in=True)):
            if self.hooks:
                self.callbacks.on_test_batch_begin(step)
            logs = self.steps_fn.test(data, shares[step],
                                      reduce=self.hooks or step == self.plan.steps - 1)
            if self.hooks:
                self.callbacks.on_test_batch_end(step, logs)
            if progress is not None:
                progress(step)
        logs = self.steps_fn.epoch_logs(logs)
        self.callbacks.on_test_end(logs)
        return {f"val_{name}": value for name, value in logs.items()}


def callback_list(callbacks, model, epochs: int, steps: int):
    import keras

    return keras.callbacks.CallbackList(list(callbacks), add_history=False,
                                        add_progbar=False, model=model, epochs=epochs,
                                        steps=steps, verbose=0)


def _named_specs(x, names: list[str]):
    """``x`` (symbolic, ``Bindings.x_template``) as ``tf.TensorSpec``s named after the
    inputs they feed (in the bindings' order), so that a signature made from them binds
    each column by name, not by TensorFlow's ``args_0``, ``args_0_1``... in text order."""
    import tensorflow as tf

    flat = tf.nest.flatten(x)
    if len(flat) != len(names) or isinstance(x, dict):
        names = [None] * len(flat)
    return tf.nest.pack_sequence_as(x, [tf.TensorSpec(t.shape, tf.as_dtype(t.dtype), name=n)
                                        for t, n in zip(flat, names)])


def _export(model, spec: TrainSpec, ctx, inputs) -> tuple[str, dict[str, str]]:
    """Every worker exports (the chief's copy is kept): SavedModel for serving, .keras file.
    ``inputs``: ``x`` as the columns feed it (``tf.TensorSpec``s named after the inputs).

    Returns the export URI and, for each input of the serving signature, the model input
    it takes (the same name unless TensorFlow could not name it: ``signature_names``). A
    model with several outputs names the signature's outputs after its own (``price``,
    ``dear``), not Keras's ``output_0``, ``output_1``.
    """
    target = storage.join(spec.model_dir, EXPORT_DIR)
    renamed: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="sparktf-export-") as local:
        path = os.path.join(local, SAVED_MODEL)
        if keras_steps.is_tf_keras(model):
            renamed = _export_tf_keras(model, path)
        else:
            renamed = _export_saved_model(model, path, inputs)
        back = {signature: name for name, signature in renamed.items()}
        if back:  # so that a bare TFModel(modelPath) still feeds inputs by name
            os.makedirs(os.path.dirname(os.path.join(path, inference.INPUT_NAMES)),
                        exist_ok=True)
            with open(os.path.join(path, inference.INPUT_NAMES), "w") as f:
                json.dump(back, f)
        model.save(os.path.join(local, KERAS_FILE))
        names = list(inference.describe(path, "serving_default")[0])
        if ctx.isChief:
            storage.put_dir(local, target)
    return target, {name: back.get(name, name) for name in names}


def _export_saved_model(model, path: str, inputs=None) -> dict[str, str]:
    """Keras's ``model.export``, with several outputs named after the model's outputs and
    the inputs named as a signature can name them; returns input name -> signature name
    for the inputs renamed. A model that declares no inputs (subclassed) takes them as
    ``inputs`` (``x`` as ``tf.TensorSpec``s) says, where Keras would make every input
    float32 and name them ``args_0``...."""
    import keras
    from keras.src.export.export_utils import get_input_signature

    if inputs is not None and not binding.declared_inputs(model):
        specs = [inputs]
    else:
        specs = get_input_signature(model)
    signature, renamed = _signature(specs)
    outputs = binding.output_names(model)
    if not outputs or len(outputs) < 2:
        model.export(path, verbose=False, input_signature=signature)
        return renamed
    archive = keras.export.ExportArchive()
    archive.track(model)

    def serve(inputs):
        return dict(zip(outputs, keras.tree.flatten(model(inputs, training=False))))

    archive.add_endpoint("serve", serve, signature)
    archive.write_out(path, verbose=False)
    return renamed


def _export_tf_keras(model, path: str) -> dict[str, str]:
    """tf_keras' ``model.export``, with the inputs named as a signature can name them;
    returns input name -> signature name for the inputs renamed."""
    import tf_keras

    inputs = getattr(model, "inputs", None)
    signature, renamed = _signature(inputs) if inputs else (None, {})
    if not renamed:
        model.export(path)
        return renamed
    # as tf_keras' export_lib.export_model, renamed
    archive = tf_keras.export.ExportArchive()
    archive.track(model)
    archive.add_endpoint("serve", model.__call__,
                         [signature] if isinstance(signature, list) and len(signature) > 1
                         else signature)
    archive.write_out(path)
    return renamed


def _signature(specs):
    """``specs`` (anything with a shape, a dtype and maybe a name: input specs, symbolic
    inputs) as ``tf.TensorSpec``s named as a SavedModel signature can name them, and
    input name -> signature name for the inputs renamed (``signature_names``)."""
    import tensorflow as tf

    renamed = signature_names([s.name for s in tf.nest.flatten(specs)
                               if getattr(s, "name", None)])

    def named(spec):
        name = getattr(spec, "name", None)
        return tf.TensorSpec(spec.shape, spec.dtype, name=renamed.get(name, name))

    return tf.nest.map_structure(named, specs), renamed


def signature_names(names: list[str]) -> dict[str, str]:
    """Input name -> a name TensorFlow can give a SavedModel signature's input, for the
    names it cannot (``größe``, ``my city``: a graph op's name is ASCII letters, digits
    and ``_.-/``): the others replaced by ``_``, unique among ``names``."""
    renamed, taken = {}, set(names)
    for name in names:
        if _SIGNATURE_NAME.fullmatch(name):
            continue
        safe = "".join(c if c.isascii() and (c.isalnum() or c in "_.-/") else "_"
                       for c in name)
        safe = safe if safe[:1].isalnum() or safe[:1] == "." else f"input_{safe}"
        candidate, n = safe, 1
        while candidate in taken:
            n += 1
            candidate = f"{safe}_{n}"
        renamed[name] = candidate
        taken.add(candidate)
    return renamed


_SIGNATURE_NAME = re.compile(r"[A-Za-z0-9.][A-Za-z0-9_.\-/]*")


def _signature_mapping(signature_inputs: dict[str, str], bound: binding.Bindings) -> dict:
    """Column -> serving signature input (``signature_inputs``: signature input -> model
    input): by the model's input names where the signature has them, else in order (a
    single input: the signature's only one)."""
    names = list(signature_inputs)
    if len(names) == 1 and len(bound.inputs) == 1:
        return {bound.inputs[0].column: names[0]}
    by_input = {name: signature for signature, name in signature_inputs.items()}
    mapping = bound.input_mapping
    if set(mapping.values()) == set(by_input):
        return {column: by_input[name] for column, name in mapping.items()}
    return dict(zip(mapping, sorted(names)))


class Validator:
    """Validates ``model`` in this process alone; its test step is traced once, then reused."""

    def __init__(self, model, spec: TrainSpec, bound: binding.Bindings, infos: dict):
        import tensorflow as tf

        self.model, self.spec, self.bound, self.infos = model, spec, bound, infos
        # the default strategy: this process alone
        self.steps = keras_steps.KerasSteps(tf.distribute.get_strategy(), model)
        self.callbacks = callback_list(spec.callbacks, model, spec.epochs, 1)

    def __call__(self, shard: feed.Shard, progress=None) -> dict[str, float]:
        """``val_loss`` and the compiled metrics (``val_`` prefixed) on ``shard``;
        ``progress(step)`` after each step."""
        plan = StepPlan.of([shard.num_rows], 0, self.spec.batch_size)
        return ValidationPass(self.steps, self.spec, shard, plan, self.callbacks, self.bound,
                              self.infos).run(progress)
