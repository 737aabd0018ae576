"""How a ``HalvingSearch`` draws its sampled trials' Params (``sampler``).

``"random"`` draws every trial before the first job, from one seeded stream
(``trials.sampled``). ``"tpe"`` draws each trial when it starts, from Optuna's
Tree-structured Parzen Estimator told every result the search holds at that moment: a
trial that trained to the last rung as complete with its metric, one that waits or
stopped at a lower rung as pruned with its metric at each rung it reached (what Optuna's
own pruners leave of a trial, which its TPE ranks by the rung reached, then the
metric), a running one as running (Optuna's constant liar). So the trials stopped at
the first rung teach it as much as the finished ones. Each draw builds the study afresh
from the schedule, seeded by the search's seed and the trial's index: the same results
in the same order give the same draws, and a search resumed from its journal, which
holds each draw, tells the sampler what the lost search told it.

A draw is a list of numbers, one per key of ``paramDistributions`` in its order (a
``choice``'s index into its values), which ``param_map`` turns into the trial's Params.
Optuna is optional (``pip install 'sparktf[tuning]'``) and imported only here, when a
search asks for ``"tpe"``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging

import numpy as np
from pyspark.ml.param import Param

from sparktf.errors import InvalidInputError
from sparktf.ml.tuning import trials

SAMPLERS = ("random", "tpe")


def startup_trials(num_trials: int) -> int:
    """The trials TPE draws at random before it models the results: Optuna's 10, or a
    quarter of a smaller search (at least 2), which would otherwise be random to its
    end."""
    return max(2, min(10, num_trials // 4))


@dataclasses.dataclass(frozen=True)
class Told:
    """What the sampler is told of one drawn trial: its draw, its metric at each rung it
    reached ({epochs: metric}, lower is better), and whether it trained to the last rung
    (``complete``), failed, or still runs."""

    drawn: tuple
    at_rungs: dict
    complete: bool = False
    failed: bool = False
    running: bool = False


class TPE:
    """Optuna's TPE over ``distributions`` ({Param or hyperParams key: Distribution or
    list}) of the tuned ``stage``."""

    def __init__(self, stage, distributions: dict, seed: int, num_trials: int):
        try:
            import optuna
        except ImportError as e:
            raise InvalidInputError(
                "sampler='tpe' draws the trials with Optuna's TPE sampler, which is not "
                "installed: pip install 'sparktf[tuning]' (or optuna), or use "
                "sampler='random'.") from e
        self.optuna = optuna
        self.stage, self.seed = stage, seed
        self.keys = list(distributions)
        self.dists = [d if isinstance(d, trials.Distribution) else trials.choice(d)
                      for d in distributions.values()]
        for key in self.keys:
            if isinstance(key, str):
                trials._check_key(key)
        self.space = {f"p{i}": self._optuna_distribution(d) for i, d in enumerate(self.dists)}
        self.startup = startup_trials(num_trials)
        self.names = tuple(k for k in self.keys if isinstance(k, str))  # hyperParams keys

    def _optuna_distribution(self, dist: trials.Distribution):
        given = self.optuna.distributions
        if dist.kind == "choice":
            return given.CategoricalDistribution(list(range(len(dist.args))))
        return given.FloatDistribution(*dist.args, log=dist.kind == "logUniform")

    def draw(self, index: int, told: list[Told]) -> list:
        """Trial ``index``'s draw, given what the search holds of the trials drawn so far."""
        optuna = self.optuna
        state = optuna.trial.TrialState
        known = []
        for one in told:
            params = {f"p{i}": v for i, v in enumerate(one.drawn)}
            values = {int(k): float(v) for k, v in one.at_rungs.items()}
            if one.running and not values:
                kind, value = state.RUNNING, None
            elif one.failed:
                kind, value = state.FAIL, None
            elif one.complete:
                kind, value = state.COMPLETE, values[max(values)]
            else:
                kind, value = state.PRUNED, None
            known.append(optuna.trial.create_trial(
                state=kind, value=value, params=params, distributions=self.space,
                intermediate_values=values))
        seed = int(np.random.SeedSequence([self.seed, index]).generate_state(1)[0])
        sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=self.startup,
                                             multivariate=True, constant_liar=True)
        with _quiet(optuna):
            storage = optuna.storages.InMemoryStorage()
            storage.create_new_study([optuna.study.StudyDirection.MINIMIZE], "sparktf")
            study = optuna.Study("sparktf", storage, sampler=sampler)
            study.add_trials(known)
            drawn = study.ask(self.space).params
        return [drawn[f"p{i}"] for i in range(len(self.dists))]

    def param_map(self, drawn: list) -> dict:
        """The trial's Params for a draw, as ``trials.sampled`` gives them."""
        found: dict = {}
        hyper = dict(self.stage.getHyperParams())
        for key, dist, value in zip(self.keys, self.dists, drawn):
            value = dist.args[int(value)] if dist.kind == "choice" else float(value)
            if isinstance(key, Param):
                found[key] = trials._plain(value)
            else:
                hyper[key] = trials._plain(value)
        if any(isinstance(key, str) for key in self.keys):
            found[self.stage.hyperParams] = hyper
        return found


@contextlib.contextmanager
def _quiet(optuna):
    """Without Optuna's line for each study made in memory (one per draw here); its
    warnings and errors still show."""
    logger = logging.getLogger("optuna")

    def keep(record: logging.LogRecord) -> bool:
        return record.levelno > logging.INFO

    handlers = list(logger.handlers)
    for handler in handlers:
        handler.addFilter(keep)
    try:
        yield
    finally:
        for handler in handlers:
            handler.removeFilter(keep)
