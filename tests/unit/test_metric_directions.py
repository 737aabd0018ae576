"""Which way each value of a fit's history is better (sparktf.runtime.training.directions,
behind metricMode="auto" and keepBestMode="auto"): Keras's own EarlyStopping(mode="auto")
is the oracle, over every metric keras.metrics exports (classes, functions, and their
names as strings), on a model whose compiled metrics Keras built itself, where sparktf
decides from a fresh model as modelFn returns it (compiled metrics not built yet)."""

import inspect

import keras
import numpy as np
import pytest

from sparktf.ml.runs import identity
from sparktf.runtime.training import directions

# the arguments a metric class cannot be made without
REQUIRED = {"IoU": dict(num_classes=2, target_class_ids=[0]), "MeanIoU": dict(num_classes=2),
            "OneHotIoU": dict(num_classes=2, target_class_ids=[0]),
            "OneHotMeanIoU": dict(num_classes=2), "PrecisionAtRecall": dict(recall=0.5),
            "RecallAtPrecision": dict(precision=0.5),
            "SensitivityAtSpecificity": dict(specificity=0.5),
            "SpecificityAtSensitivity": dict(sensitivity=0.5),
            "MeanMetricWrapper": dict(fn=keras.losses.mean_squared_error)}
NOT_A_METRIC = {"Metric"}  # the abstract base class: it measures nothing
# a model's own trackers: compile takes no Mean or Sum (their update_state takes values,
# not labels and predictions), so no fit logs one as a compiled metric
TRACKERS = {"Mean", "Sum"}
CLASSES = sorted(n for n, v in vars(keras.metrics).items() if inspect.isclass(v) and
                 issubclass(v, keras.metrics.Metric) and n not in NOT_A_METRIC | TRACKERS)
FUNCTIONS = sorted(n for n, v in vars(keras.metrics).items() if inspect.isfunction(v) and
                   n not in ("get", "serialize", "deserialize"))


def _resolved(name: str) -> bool:
    """Whether compile takes ``name`` as a metric (Keras refuses "huber", "log_cosh")."""
    try:
        keras.metrics.get(name)
    except ValueError:
        return False
    return True


NAMES = [n for n in FUNCTIONS if _resolved(n)]

_rng = np.random.default_rng(0)
X = _rng.normal(size=(8, 3)).astype("float32")
# (output units, activation, labels): the label kinds Keras's metrics take
DATA = [(2, "softmax", np.eye(2, dtype="float32")[_rng.integers(0, 2, 8)]),
        (2, "softmax", _rng.integers(0, 2, (8, 1))),
        (1, "sigmoid", _rng.integers(0, 2, (8, 1)).astype("float32"))]


def _model(metric, units, activation):
    """``metric``: what makes the metric, a fresh one for each model. Built as a task's
    fresh process builds it, and as the driver does (names counted from zero: the second
    ``AUC()`` of a process is ``auc_1``)."""
    def build(hparams):
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(units, activation)])
        model.compile("sgd", "mse", metrics=[metric()])
        return model

    model, _, error = identity.built(build, {})
    assert error is None
    return model


def keras_decides(model, key: str):
    """What Keras's EarlyStopping(monitor=key, mode="auto") decides at its first epoch's
    end: True (larger is better), False, or None (it refuses: no direction)."""
    stopper = keras.callbacks.EarlyStopping(monitor=key, mode="auto")
    stopper.set_model(model)
    stopper.on_train_begin()
    try:
        stopper.on_epoch_end(0, {key: 0.5})
    except ValueError as e:
        assert "isn't able to automatically determine" in str(e)
        return None
    assert stopper.monitor_op in (keras.ops.greater, keras.ops.less)
    return stopper.monitor_op is keras.ops.greater


def _logged(make):
    """A model Keras built its compiled losses and metrics for, as its train step does,
    with the logs' keys; for the first label kind the metric takes."""
    for units, activation, y in DATA:
        model = make(units, activation)
        try:
            y_pred = model(X)
            model.compute_loss(X, y, y_pred)
            logs = model.compute_metrics(X, y, y_pred, sample_weight=None)
            return model, sorted(logs), (units, activation)
        except Exception:  # noqa: BLE001 - another kind of label
            continue
    raise AssertionError("no label kind fits the metric")


def _check_against_keras(metric):
    def make(units, activation):
        return _model(metric, units, activation)

    built, keys, shape = _logged(make)
    fresh = make(*shape)  # as modelFn returns it: its compiled metrics not built
    assert not fresh._compile_metrics.built
    decided = {key: directions.larger_is_better(fresh, key) for key in keys}
    assert decided == {key: keras_decides(built, key) for key in keys}
    assert {directions.larger_is_better(fresh, "val_" + k) for k in keys} <= {*decided.values()}
    return decided


@pytest.mark.parametrize("name", CLASSES)
def test_every_metric_class_has_the_direction_keras_gives_it(name):
    cls = getattr(keras.metrics, name)
    decided = _check_against_keras(lambda: cls(**REQUIRED.get(name, {})))
    assert decided["loss"] is False


@pytest.mark.parametrize("name", FUNCTIONS)
def test_every_metric_function_has_the_direction_keras_gives_it(name):
    _check_against_keras(lambda: getattr(keras.metrics, name))


@pytest.mark.parametrize("name", [*NAMES, "accuracy", "acc", "mae", "mse", "auc",
                                  "precision", "recall", "r2_score"])
def test_every_metric_name_has_the_direction_keras_gives_it(name):
    _check_against_keras(lambda: name)


@pytest.mark.parametrize("name", sorted(TRACKERS))
def test_trackers_are_no_compiled_metrics_and_have_no_direction(name):
    with pytest.raises(AssertionError, match="no label kind fits"):
        _logged(lambda u, a: _model(getattr(keras.metrics, name), u, a))
    assert directions.larger_is_better(
        _model(getattr(keras.metrics, name), 2, "softmax"), name.lower()) is None


ISSUE_53 = {"binary_io_u": lambda: keras.metrics.BinaryIoU(),
            "mean_io_u": lambda: keras.metrics.MeanIoU(2),
            "io_u": lambda: keras.metrics.IoU(2, [0]),
            "one_hot_io_u": lambda: keras.metrics.OneHotIoU(2, [0]),
            "one_hot_mean_io_u": lambda: keras.metrics.OneHotMeanIoU(2),
            "fbeta_score": lambda: keras.metrics.FBetaScore(),
            "cosine_similarity": lambda: keras.metrics.CosineSimilarity(),
            "pearson_correlation": lambda: keras.metrics.PearsonCorrelation(),
            "r2_score": lambda: keras.metrics.R2Score(),
            "sensitivity_at_specificity": lambda: keras.metrics.SensitivityAtSpecificity(0.5),
            "specificity_at_sensitivity": lambda: keras.metrics.SpecificityAtSensitivity(0.5),
            "top_k_categorical_accuracy": lambda: keras.metrics.TopKCategoricalAccuracy(),
            "sparse_top_k_categorical_accuracy":
                lambda: keras.metrics.SparseTopKCategoricalAccuracy()}


@pytest.mark.parametrize("name", sorted(ISSUE_53))
def test_the_values_issue_53_names_are_maximised(name):
    """What an old list of names minimised (io_u is not iou), or did not know."""
    model = _model(ISSUE_53[name], 2, "softmax")
    assert directions.larger_is_better(model, "val_" + name) is True


def test_a_multi_output_model_has_each_outputs_metrics_and_losses_under_the_logs_names():
    """Keras's logs prefix a metric with its output's name (and number a repeated one);
    Keras's own EarlyStopping finds no prefixed name: sparktf gives each the direction
    Keras gives the metric on one output (checked above), each output's loss minimised."""
    def build(hparams):
        inputs = keras.Input((3,), name="x")
        price = keras.layers.Dense(1, name="price")(inputs)
        kind = keras.layers.Dense(3, activation="softmax", name="kind")(inputs)
        model = keras.Model(inputs, {"price": price, "kind": kind})
        model.compile("sgd", {"price": "mse", "kind": "sparse_categorical_crossentropy"},
                      metrics={"kind": ["accuracy", "accuracy",
                                        keras.metrics.MeanIoU(3, sparse_y_pred=False)],
                               "price": ["mae", keras.metrics.R2Score()]},
                      weighted_metrics={"kind": ["accuracy"]})
        return model

    def make():
        return identity.built(build, {})[0]

    y = {"price": np.zeros((8, 1)), "kind": np.arange(8) % 3}
    history = make().fit(X, y, validation_data=(X, y), epochs=1, verbose=0).history
    fresh = make()
    assert {key: directions.larger_is_better(fresh, key) for key in history} == {
        **{f"{v}{k}": False for v in ("", "val_") for k in ("loss", "kind_loss",
                                                            "price_loss", "price_mae")},
        **{f"{v}{k}": True for v in ("", "val_") for k in (
            "kind_accuracy", "kind_accuracy_1", "kind_weighted_accuracy",
            "kind_mean_io_u", "price_r2_score")}}
    assert keras_decides(make(), "kind_accuracy") is None  # what Keras itself cannot say


def test_a_value_no_metric_gives_a_direction_to_has_none():
    model = _model(keras.metrics.TruePositives, 1, "sigmoid")
    assert directions.larger_is_better(model, "val_true_positives") is None
    assert directions.larger_is_better(model, "val_no_such_value") is None
    assert directions.larger_is_better(model, "val_loss") is False


def test_a_tf_keras_models_metrics_take_the_direction_of_their_keras_3_kind():
    """tf_keras metrics carry no direction: each takes its Keras 3 twin's (the oracle:
    Keras 3's EarlyStopping on the Keras 3 metric of that class or function)."""
    tf_keras = pytest.importorskip("tf_keras")
    names = [n for n in CLASSES if inspect.isclass(getattr(tf_keras.metrics, n, None))
             and n not in REQUIRED]
    model = tf_keras.Sequential([tf_keras.Input((3,)), tf_keras.layers.Dense(2, "softmax")])
    metrics = [getattr(tf_keras.metrics, n)() for n in names]
    model.compile("sgd", "mse", metrics=[*metrics, "acc", "mae", "mse"])
    found = directions.directions(model)
    assert found["loss"] == directions.DOWN
    for name, metric in zip(names, metrics):
        cls = getattr(keras.metrics, name)
        built, keys, _ = _logged(lambda u, a, cls=cls: _model(cls, u, a))
        [key] = [k for k in keys if k != "loss"]
        want = keras_decides(built, key)
        assert (None if found[metric.name] is None else found[metric.name] == "up") == want, \
            name
    assert [found[k] for k in ("acc", "mae", "mse")] == ["up", "down", "down"]


def test_keep_best_in_the_task_takes_the_same_direction_for_auto():
    """keepBest's callback, should it be given "auto" (the driver decides it first): the
    direction of the model's metric, a multi-output model's prefixed names too."""
    from sparktf.errors import InvalidInputError
    from sparktf.runtime.training import best

    model = _model(keras.metrics.BinaryIoU, 1, "sigmoid")
    kept = best.keep_best("val_binary_io_u", "auto")
    kept.set_model(model)
    for epoch, value in enumerate([0.3, 0.5, 0.4]):
        kept.on_epoch_end(epoch, {"val_binary_io_u": value})
    assert kept.state() == {"epoch": 2, "value": 0.5}
    unknown = best.keep_best("val_true_positives", "auto")
    unknown.set_model(_model(keras.metrics.TruePositives, 1, "sigmoid"))
    with pytest.raises(InvalidInputError, match="set keepBestMode='max' or 'min'"):
        unknown.on_epoch_end(0, {"val_true_positives": 3.0})


@pytest.mark.parametrize("kind", ["Sequential without Input", "subclassed"])
def test_a_model_of_no_declared_inputs_has_its_metrics_directions(kind):
    """Found by review: such a model's compiled metrics are unbuilt until its first batch,
    so only 'loss' had a direction and keepBest/metricMode 'auto' refused models sparktf
    trains. Keras's EarlyStopping decides after a fit (the oracle)."""

    class Subclassed(keras.Model):
        def __init__(self):
            super().__init__()
            self.dense = keras.layers.Dense(3, activation="softmax")

        def call(self, x):
            return self.dense(x)

    def make():
        keras.utils.set_random_seed(0)
        model = (keras.Sequential([keras.layers.Dense(3, activation="softmax")])
                 if kind.startswith("Sequential") else Subclassed())
        model.compile("sgd", "categorical_crossentropy",
                      metrics=["accuracy", "mae", keras.metrics.F1Score(average="macro")])
        return model

    fitted = make()
    fitted.fit(np.ones((4, 3), "float32"), np.eye(3, dtype="float32")[[0, 1, 2, 1]], verbose=0)
    fresh = make()
    for key in ("accuracy", "mae", "f1_score", "val_accuracy", "loss"):
        assert directions.larger_is_better(fresh, key) == keras_decides(fitted, key), key


def test_a_tf_keras_metric_keeps_its_name_however_often_the_driver_builds_it():
    """Found by review: tf_keras counts names per graph, so a driver building each trial's
    model found 'auc_2', 'auc_5'... where each task's fresh process logs 'auc'."""
    tf_keras = pytest.importorskip("tf_keras")
    from sparktf.ml.runs import identity

    def build(hparams):
        model = tf_keras.Sequential([tf_keras.Input((3,)), tf_keras.layers.Dense(1, "sigmoid")])
        model.compile("sgd", "binary_crossentropy", metrics=[tf_keras.metrics.AUC()])
        return model

    def count(name):
        return int(name.rpartition("_")[2]) if name != "auc" else 0

    before = count(tf_keras.metrics.AUC().name)  # the driver's own count
    for _ in range(3):
        model, _, error = identity.built(build, {})
        assert error is None
        assert directions.larger_is_better(model, "val_auc") is True
    assert count(tf_keras.metrics.AUC().name) == before + 1  # the driver's counts given back
