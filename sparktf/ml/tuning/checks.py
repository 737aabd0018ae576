"""What would fail a ``HalvingSearch`` at a rung, refused before any job (``check``): a
validation metric a trial cannot have, a model that depends on its epochs (a trial
continues its run across rungs: each rung would build another model), a metric whose
direction cannot be known. Every distinct setting that reaches ``modelFn`` (its
``hparams``, its ``modelFn``) is built on the driver, not only the first trial's; once
more at the last rung's epochs where it read ``hparams["epochs"]`` (or the whole dict)."""

from __future__ import annotations

import json

from sparktf.errors import InvalidInputError
from sparktf.ml import fit_checks, metric_modes
from sparktf.ml.runs import identity
from sparktf.ml.tuning import trials


def check(search, estimators: list, rungs: list[int], labels: list[dict]) -> bool:
    """Refuses what would fail a trial at a rung; whether a larger metric is better
    (``search``: the ``HalvingSearch``, ``estimators``: its trials' fits, ``labels``: each
    trial's Params as its lines show them)."""
    metric, evaluator = search.getOrDefault(search.metric), search.getEvaluator()
    if evaluator is None and metric.startswith("val_"):
        _check_holds_out_rows(metric, estimators)
    mode = search.getOrDefault(search.metricMode)
    auto = evaluator is None and mode == "auto" and not metric_modes.is_loss(metric)
    larger: dict[int, bool] = {}
    if len(rungs) > 1 or auto:
        for index, est in _distinct_settings(estimators):
            whose = f" for trial {index} ({trials.shown(labels[index])})"
            hparams = identity.KeysRead({**est.hparams(), "epochs": rungs[0]})
            model, first, error = identity.built(est.getModelFn(), hparams)
            read = error is None and "epochs" in hparams.read
            if error is not None:  # it cannot take a dict subclass (yaml, keras.tree): a dict
                model, first, error = identity.built(est.getModelFn(), dict(hparams))
                read = True
            # built again at the last rung only if it read its epochs: a search of many
            # points paid two builds each before its first job (60 points: 6 s of maxTime)
            if len(rungs) > 1 and error is None and read:
                _check_same_model(first, est, rungs, whose)
            if auto:
                larger[index] = metric_modes.larger_is_better(
                    model, metric, {"metric": metric}, "metricMode", whose, error)
    if evaluator is not None:
        return evaluator.isLargerBetter()
    if not auto:
        return mode == "max"  # "auto" here: a loss
    return _agreed(metric, larger, labels)


def _check_holds_out_rows(metric: str, estimators: list) -> None:
    for index, est in enumerate(estimators):
        if not fit_checks.holds_out_rows(est):
            raise InvalidInputError(
                f"metric={metric!r} is a validation value, but trial {index}'s "
                "estimator holds out no rows: set validationFraction or "
                "validationCol on it, name a training value of the history "
                "(metric='loss'), or give an evaluator.")


def _distinct_settings(estimators: list) -> list:
    """(index, estimator) of the first trial of each setting that reaches ``modelFn``:
    its function and ``hparams`` but the epochs, which the rungs decide."""
    seen, found = set(), []
    for index, est in enumerate(estimators):
        hparams = {k: v for k, v in est.hparams().items() if k != "epochs"}
        key = json.dumps(identity.code_identity({"modelFn": est.getModelFn(), **hparams}),
                         sort_keys=True, default=repr)
        if key not in seen:
            seen.add(key)
            found.append((index, est))
    return found


def _check_same_model(first: dict, est, rungs: list[int], whose: str) -> None:
    """Refuses a model that ``modelFn`` builds otherwise at the last rung's epochs."""
    last = identity.model_identity(est.getModelFn(), {**est.hparams(), "epochs": rungs[-1]})
    said = identity.differences(first, last)
    if said:
        raise InvalidInputError(
            f"modelFn builds another model for other epochs{whose}: " + "; ".join(said) +
            f" at epochs={rungs[0]} then {rungs[-1]}. A trial continues from its checkpoint "
            "across rungs, so its model must not depend on hparams['epochs']. Take what it "
            "computes from it (a decay's steps) from a hyperParams value of its own.")


def _agreed(metric: str, larger: dict[int, bool], labels: list[dict]) -> bool:
    """The one direction every trial's model gives ``metric``; refused if they differ."""
    if len(set(larger.values())) > 1:
        up = [i for i, v in larger.items() if v][0]
        down = [i for i, v in larger.items() if not v][0]
        raise InvalidInputError(
            f"metricMode='auto' takes the direction of {metric!r} from each trial's model, "
            f"and they differ: maximised in trial {up}'s ({trials.shown(labels[up])}), minimised "
            f"in trial {down}'s ({trials.shown(labels[down])}). Set metricMode='max' or 'min' to "
            f"compare the trials one way. Received: metric={metric!r}, metricMode='auto'")
    return next(iter(larger.values()))
