"""sparktf from a Spark Connect client (``SparkSession.builder.remote``), for real.

A local Connect server cannot share this test process with the classic session, so
one client process (``scripts/connect_jobs.py``) runs every scenario and reports
what it found; the tests check it.
"""

import pytest

from tests import conftest

# docs_page first: the site's page starts the session the others use (scripts/connect_jobs.py)
SCENARIOS = ["docs_page", "fit_transform", "kinds", "run_with_df", "bad_input",
             "pipeline_persistence", "cross_validator", "train_validation_split",
             "halving_search", "streaming", "show_then_stop"]
JOB = conftest.Job("connect", "tests/integration/scripts/connect_jobs.py",
                   conftest.Job.WORKDIR, *SCENARIOS, expected_s=175)

pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def found():
    pytest.importorskip("zstandard", reason="pip install 'sparktf[connect]'")
    results = JOB.finished().results()
    assert results.get("session", {}).get("type", "").startswith("pyspark.sql.connect")
    return results


def _ok(found, name):
    result = found[name]
    assert "failed" not in result, result["failed"]
    return result


def test_fit_with_validation_transform_evaluator_and_sql_on_connect(found):
    result = _ok(found, "fit_transform")
    history = result["history"]
    assert len(history["loss"]) == 4 and history["loss"][-1] < history["loss"][0]
    assert len(history["val_accuracy"]) == 4
    assert result["accuracy"] > 0.85
    assert result["sql_equals_transform"]


def test_run_with_a_dataframe_on_connect(found):
    assert sum(_ok(found, "run_with_df")["rows"]) == 500


def test_bad_input_is_refused_on_connect_before_any_job(found):
    result = _ok(found, "bad_input")
    assert result["error"] == "InvalidInputError"
    assert "Column 'label' has 1 null" in result["message"]


def test_pipeline_save_overwrite_and_load_on_connect(found):
    result = _ok(found, "pipeline_persistence")
    assert result["stages"] == ["VectorAssembler", "TFModel"]
    assert result["val_metrics"] == ["val_accuracy", "val_loss"]
    assert result["fresh_session"] and result["same_predictions"]
    assert result["loaded_estimator_epochs"] == 2


def test_cross_validator_on_connect(found):
    result = _ok(found, "cross_validator")
    assert result["best"] == "TFModel"
    assert result["avgMetrics"][1] > result["avgMetrics"][0] + 0.2


def test_train_validation_split_on_connect(found):
    result = _ok(found, "train_validation_split")
    assert result["best"] == "TFModel"
    assert result["validationMetrics"][1] > result["validationMetrics"][0]  # 64 > 4 units
    assert result["test_accuracy"] > 0.85


def test_halving_search_picks_and_scores_what_train_validation_split_does_on_connect(found):
    import numpy as np

    result = _ok(found, "halving_search")
    print(result)
    assert result["best"] == {"units": 64}
    assert result["trials_frame"] == 2 and result["same_predictions"]
    assert result["new_params"] == [900.0, "tpe", 60.0, True, 3]  # sampler, maxTime... saved
    by_trial = {t["trial"]: t for t in result["trials"]}
    assert by_trial[1]["rungEpochs"] == [2, 4] and by_trial[1]["epochs"] == 4
    assert by_trial[0]["rungEpochs"] == [2] and by_trial[0]["epochs"] == 2
    np.testing.assert_allclose(by_trial[1]["metrics"][-1], result["tvs"][1], rtol=1e-6)


def test_streaming_query_scored_into_a_memory_sink_on_connect(found):
    result = _ok(found, "streaming")
    assert result["rows"] == result["batch_rows"] > 0


def test_column_kinds_by_name_and_preprocessing_statistics_on_connect(found):
    result = found["kinds"]
    assert "failed" not in result, result.get("failed")
    assert result["keys"] and result["max_rel_diff"] < 1e-3, result
    assert result["scored"] == result["rows"]
    assert result["vocabulary_equal"]


def test_stop_right_after_a_show_over_a_transform_logs_no_error(found):
    """``spark.stop()`` right after ``transform(...).show(3)``: the session is released
    after the client's releases of its executions (sessions._release_executions_at_stop),
    and the server logs no ``releaseExecute ... SESSION_CLOSED`` error."""
    assert _ok(found, "show_then_stop")["shown"]
    stderr = JOB.finished().stderr
    errors = [line for line in stderr.splitlines() if "releaseExecute" in line or
              "SESSION_CLOSED" in line]
    assert not errors, "\n".join(errors[:5])


def test_the_connect_page_s_example_starts_the_session_the_others_use(found):
    """docs/guide/connect.md's example, run first as a reader runs it: its own
    ``PYSPARK_PYTHON`` and ``remote("local-cluster[...]").getOrCreate()`` start the server
    every other scenario here then uses (tests/integration/test_docs.py leaves the page to
    this job), its fit trains the 3 epochs it asks for, and it stops its session last
    (done at the job's end, after show_then_stop)."""
    result = _ok(found, "docs_page")
    assert result["stopped_its_session"], "the page did not end with spark.stop()"
    assert len(result["history"]["loss"]) == 3, result
