"""HalvingSearch beyond random trials (issue 56) on a real local-cluster: TPE's draws, a
finished search that grows and trains only its new work, the checkpoints given back, and
maxTime. What the fits trained is counted by a callback on the executors, and what is
left on disk by listing the trials' folders, not by what the search says."""

import collections
import json
import logging
import os
import time

import numpy as np
import pytest
from pyspark.ml.tuning import ParamGridBuilder

from sparktf.ml import TFEstimator
from sparktf.ml.tuning import HalvingSearch, halving, logUniform
from tests.integration import models
from tests.integration.test_tuning import (
    EpochsTrained,
    _trained,
    linear_frame,  # noqa: F401 - a fixture
)

pytestmark = pytest.mark.timeout(900)


def _with_checkpoints(folder) -> list[int]:
    """The trials whose run under ``folder`` still holds checkpoints."""
    return sorted(int(name.split("-")[1]) for name in os.listdir(folder)
                  if name.startswith("trial-") and
                  os.path.isdir(os.path.join(folder, name, "checkpoints")))


def test_tpe_grows_trains_only_new_work_and_gives_checkpoints_back(
        spark, linear_frame, tmp_path, caplog):  # noqa: F811 - the fixture
    """A TPE search of 4 trials to 2 epochs, then the same runId with 6 trials to 4 epochs:
    the first search's trials keep their draws and results, no epoch is trained twice but
    by a trial whose checkpoints were given back (which says so and trains from the start),
    and each finished search leaves the checkpoints of its best trial alone."""
    pytest.importorskip("optuna")
    caplog.set_level(logging.INFO, logger="sparktf")
    log = str(tmp_path / "epochs")
    est = TFEstimator(modelFn=models.linear, numWorkers=1, batchSize=30, shuffle=True, seed=2,
                      callbacks=[EpochsTrained(log)], modelDir=str(tmp_path / "m"))
    search = HalvingSearch(estimator=est, paramDistributions={
        est.learningRate: logUniform(1e-3, 1.0)}, numTrials=4, sampler="tpe", metric="loss",
        minEpochs=1, maxEpochs=2, reductionFactor=2, parallelism=2, seed=3, runId="tpe")
    first = search.fit(linear_frame)
    folder = str(tmp_path / "m" / "tpe")
    events = json.loads(open(os.path.join(folder, "search.json")).read())["events"]
    draws = [e for e in events if e["kind"] == "start" and e["epochs"][0] == 0]
    assert len(draws) == 4 and all(len(e["drawn"]) == 1 for e in draws)
    assert caplog.text.count("drawn by TPE") == 4
    rates = {r["trial"]: r["params"]["learningRate"] for r in first.trialRecords}
    assert len(set(rates.values())) == 4
    assert _with_checkpoints(folder) == [first.bestTrial]  # given back: all but the best's
    assert all(os.path.isdir(os.path.join(folder, f"trial-{i:03d}", "export"))
               for i in range(4))
    trained_first = _trained(log)
    os.remove(log)

    caplog.clear()
    grown = search.copy({search.numTrials: 6, search.maxEpochs: 4}).fit(linear_frame)
    records = {r["trial"]: r for r in grown.trialRecords}
    print("first:", *first.trialRecords, sep="\n")
    print("grown:", *grown.trialRecords, sep="\n")
    assert len(records) == 6
    for before in first.trialRecords:  # the finished search's trials, with their results
        after = records[before["trial"]]
        assert after["params"] == before["params"]
        n = len(before["metrics"])
        np.testing.assert_allclose(after["metrics"][:n], before["metrics"], rtol=1e-6)
        assert after["rungEpochs"][:n] == before["rungEpochs"]
    trained = _trained(log)
    afresh = {int(line.split("trial ")[1].split("'")[0]) for line in caplog.text.splitlines()
              if "trains from the start" in line}
    old = {r["trial"]: r for r in first.trialRecords}
    for index, rate in rates.items():  # an old trial trains only past its rungs
        epochs = trained.get(float(f"{rate:.6g}"), [])  # as EpochsTrained writes it
        if index in afresh:
            assert epochs == list(range(records[index]["epochs"])), (index, epochs)
        else:
            assert epochs == list(range(old[index]["epochs"], records[index]["epochs"])), \
                (index, epochs, trained_first)
    assert afresh <= set(range(4)) - {first.bestTrial}
    new_rates = {r["params"]["learningRate"] for i, r in records.items() if i >= 4}
    assert len(new_rates) == 2 and not new_rates & set(rates.values())
    assert max(len(r["rungEpochs"]) for r in records.values()) == 3  # a trial reached 4
    assert _with_checkpoints(folder) == [grown.bestTrial]
    assert grown.getOrDefault(grown.sampler) == "tpe"

    path = str(tmp_path / "saved")  # the new Params are saved and loaded with the search
    search.copy({search.maxTime: 120.0, search.keepTrialCheckpoints: True}).save(path)
    loaded = HalvingSearch.load(path)
    assert (loaded.getOrDefault("sampler"), loaded.getMaxTime(),
            loaded.getOrDefault("keepTrialCheckpoints")) == ("tpe", 120.0, True)


class Stamped(EpochsTrained):
    """Appends ``<learning rate> <epoch> <time.time()>`` as each epoch begins."""

    def on_epoch_begin(self, epoch, logs=None):
        import keras
        rate = float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate))
        with open(self.path, "a") as f:
            f.write(f"{rate:.6g} {epoch} {time.time()}\n")


def test_max_time_stops_the_search_and_keeps_the_best_so_far(
        spark, linear_frame, tmp_path):  # noqa: F811 - the fixture
    """maxTime five warm fits long over a grid of 60 (thirty fits of work, two at once: the
    search's own fits may run six times as fast as the warm fit and still leave trials
    unstarted): no job starts after it (one submitted just before it begins its epoch
    within a cold fit's time), the running jobs stop at their last checkpoint, the trials
    never started say so, the best is at the highest rung reached, and the cut trials keep
    their checkpoints: fitted again, the search continues where it stopped, training
    again only the epochs the cut jobs had under way."""
    est = TFEstimator(modelFn=models.linear, numWorkers=1, batchSize=30, shuffle=True, seed=2,
                      modelDir=str(tmp_path / "m"))
    # A fit on both executors first: it starts each one's Python worker and spare where
    # Spark had ended them (after a minute idle), and bounds a job's start. Else the warm
    # fit, on one executor, measured 1.7 s or 8 s (a TensorFlow import) as it landed, and
    # the search's first job on the other executor spent most of a short maxTime starting.
    cold = time.monotonic()
    est.copy({est.epochs: 2, est.numWorkers: 2}).fit(linear_frame)
    warm = time.monotonic()  # a warm 2-epoch fit: the unit of this test's clock
    est.copy({est.epochs: 2}).fit(linear_frame)
    budget, cold = 5 * (time.monotonic() - warm), warm - cold
    log = str(tmp_path / "epochs")
    rates = list(np.geomspace(0.5, 1e-3, 60))
    grid = ParamGridBuilder().addGrid(est.learningRate, rates).build()
    search = HalvingSearch(estimator=est.copy({est.callbacks: [Stamped(log)]}),
                           estimatorParamMaps=grid, metric="loss", minEpochs=2, maxEpochs=6,
                           reductionFactor=3, parallelism=2, seed=1, runId="timed",
                           maxTime=budget)
    started = time.time()
    found = search.fit(linear_frame)
    took = time.time() - started
    records = {r["trial"]: r for r in found.trialRecords}
    print(f"maxTime {budget:.1f} s (5 warm fits), a cold fit {cold:.1f} s, the search "
          f"{took:.1f} s")
    print(*records.values(), sep="\n")
    never = [i for i, r in records.items() if r["stopReason"] == halving.NOT_STARTED]
    assert never and all(records[i]["epochs"] == 0 for i in never)
    assert took < budget + cold + 30, "maxTime, a job's cancel and the model's export"
    with open(log) as f:
        begun = [line.split() for line in f]
    last = max(float(b[2]) for b in begun) - started
    print(f"the last epoch began {last:.2f} s after the search started, {last - budget:+.2f} s "
          f"from maxTime (at most {cold:.2f} s: a cold fit, its job's start included)")
    assert last < budget + cold, \
        "no epoch begins a job started after maxTime"
    folder = str(tmp_path / "m" / "timed")
    kept = _with_checkpoints(folder)
    for index, record in records.items():  # as far as each got: its last checkpoint
        pointer = os.path.join(folder, f"trial-{index:03d}", "checkpoints", "latest.json")
        if index in kept and not os.path.exists(pointer):
            # cut while its first checkpoint was being written (found in CI): never
            # committed, so never loaded; continued, the trial trains from its start. Its
            # epochs are counted from that pointer, so the log says what it began: its
            # first epoch at most (a checkpoint is written before the next epoch begins)
            assert record["stopReason"].startswith("maxTime ran out"), record
            assert {b[1] for b in begun if b[0] == f"{rates[index]:.6g}"} <= {"0"}, \
                (record, "a later epoch began: a checkpoint before it was not committed")
        elif index in kept:
            state = json.loads(open(pointer).read())
            assert state["dir"].endswith(f"{record['epochs']:05d}"), (index, state)
        elif record["epochs"]:  # given back before maxTime: it could train no further
            assert record["stopReason"].startswith(("not in the top", "trained to")), record
        if record["stopReason"].startswith("maxTime ran out") and record["epochs"]:
            assert index in kept, "a search cut by maxTime continues from them"
    reached = max(len(r["rungEpochs"]) for r in records.values())
    assert len(records[found.bestTrial]["rungEpochs"]) == reached
    best = min((r for r in records.values() if len(r["rungEpochs"]) == reached),
               key=lambda r: r["metrics"][-1])
    assert best["trial"] == found.bestTrial

    # continues: the cut jobs first, then the rest; with a cold fit's time more, so that a
    # job's start cannot take all of it (found: 8.4 s, and nothing trained)
    again = search.copy({search.maxTime: budget + cold}).fit(linear_frame)
    with open(log) as f:
        begun_twice = collections.Counter(tuple(line.split()[:2]) for line in f)
    cut = {(f"{rates[i]:.6g}", str(r["epochs"])) for i, r in records.items()
           if r["stopReason"].startswith("maxTime ran out after")}  # the epoch under way
    assert {k for k, n in begun_twice.items() if n > 1} <= cut, (begun_twice, cut)
    assert max(begun_twice.values()) <= 2
    assert sum(r["epochs"] for r in again.trialRecords) > \
        sum(r["epochs"] for r in found.trialRecords)
