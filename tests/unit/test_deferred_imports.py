"""Keras's optional helpers (scikit-learn wrappers, matplotlib visualization) are loaded at
their first use in sparktf's processes, and then work as if imported eagerly. Each case
runs in a fresh interpreter: this one has imported Keras already."""

import json
import subprocess
import sys
import textwrap

import pytest

HELPERS = ("sklearn", "scipy.stats", "matplotlib.pyplot")


def _python(code: str, *args: str) -> dict:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_helpers_stay_unloaded_through_a_traced_fit_and_work_at_their_first_use():
    pytest.importorskip("sklearn")
    pytest.importorskip("matplotlib")
    found = _python("""
        import inspect, json, sys, time
        import cloudpickle
        t = time.process_time()
        from sparktf.runtime.worker_tuning import deferred_imports
        deferred_imports.import_keras()
        cpu = time.process_time() - t
        import keras
        import numpy as np
        helpers = %r
        after_import = [m for m in helpers if m in sys.modules]
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
        model.compile("sgd", "mse")
        model.fit(np.ones((8, 3)), np.ones(8), verbose=0)  # traces a tf.function
        inspect.getmodule(print)  # reads __file__ of every module
        cloudpickle.dumps(lambda x: x + 1)
        after_fit = [m for m in helpers if m in sys.modules]
        deferred = sorted(n for n, m in sys.modules.items()
                          if type(m).__name__ == "_DeferredModule")
        # pickled by reference, as modules are, and still not run
        pickled = cloudpickle.loads(cloudpickle.dumps(lambda: keras.wrappers))() is \
            keras.wrappers and type(keras.wrappers).__name__ == "_DeferredModule"
        # a first use racing a direct import of a module that the first use imports too
        import threading
        out = {}
        def first_use():
            out["gallery"] = keras.visualization.plot_image_gallery
        def direct():
            import keras.src.visualization.plot_segmentation_mask_gallery  # noqa: F401
            out["direct"] = True
        threads = [threading.Thread(target=first_use, daemon=True),
                   threading.Thread(target=direct, daemon=True)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        raced = sorted(out) if not any(t.is_alive() for t in threads) else "hung"
        from keras.wrappers import SKLearnClassifier
        import sklearn.base
        try:
            keras.wrappers.no_such_name
            missing = "no error"
        except AttributeError as e:
            missing = str(e)
        print(json.dumps({
            "cpu": cpu, "after_import": after_import, "after_fit": after_fit,
            "deferred": deferred, "pickled": pickled, "raced": raced,
            "sklearn_estimator": issubclass(SKLearnClassifier, sklearn.base.BaseEstimator),
            "gallery": callable(keras.visualization.plot_image_gallery),
            "loader": type(keras.wrappers.__loader__).__name__,
            "dir": "SKLearnRegressor" in dir(keras.wrappers), "missing": missing}))
    """ % (HELPERS,))
    print(f"\nimport keras + tensorflow with the helpers deferred: {found['cpu']:.2f} s of CPU")
    assert found["after_import"] == [] and found["after_fit"] == []
    assert found["deferred"] == ["keras.src.visualization.plot_image_gallery",
                                 "keras.visualization", "keras.wrappers"]
    assert found["pickled"] and found["raced"] == ["direct", "gallery"]
    assert found["sklearn_estimator"] and found["gallery"]
    assert found["loader"] == "SourceFileLoader" and found["dir"]
    assert "no_such_name" in found["missing"]


def test_a_deferred_module_runs_once_across_threads_and_again_after_a_failure(tmp_path):
    (tmp_path / "helper.py").write_text(textwrap.dedent("""
        import os, time
        path = os.environ["RUNS"]
        with open(path, "a") as f:
            f.write("x")
        runs = len(open(path).read())
        time.sleep(0.2)  # the other threads ask meanwhile
        if runs == 1:
            raise RuntimeError("first run fails")
        value = runs
    """))
    (tmp_path / "broken.py").write_text("object().missing\n")
    (tmp_path / "settable.py").write_text("value = 1\nother = 2\n")
    (tmp_path / "reloadable.py").write_text("value = 1\n")
    found = _python("""
        import importlib, json, os, sys, threading
        sys.path.insert(0, sys.argv[1])
        os.environ["RUNS"] = os.path.join(sys.argv[1], "runs")
        from sparktf.runtime.worker_tuning import deferred_imports
        deferred_imports.DEFERRED = frozenset({"helper", "broken", "settable", "reloadable"})
        with deferred_imports.deferred():
            import helper, broken, settable, reloadable
        ran_at_import = os.path.exists(os.environ["RUNS"])
        try:
            helper.value
            first = "no error"
        except ImportError as e:
            first = f"{e} | cause: {e.__cause__!r}"
        values = []
        threads = [threading.Thread(target=lambda: values.append(helper.value))
                   for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        try:  # an AttributeError inside the module is not taken for a missing attribute
            hasattr(broken, "anything")
            broken_error = "no error"
        except ImportError as e:
            broken_error = f"{e} | cause: {type(e.__cause__).__name__}"
        settable.value = 10  # runs the module first: the module's code does not undo it
        reloaded = importlib.reload(reloadable)
        print(json.dumps({"ran_at_import": ran_at_import, "first": first, "values": values,
                          "runs": len(open(os.environ["RUNS"]).read()),
                          "broken": broken_error, "set": [settable.value, settable.other],
                          "reloaded": [reloaded is reloadable, reloadable.value,
                                       hasattr(reloadable, "nope"),
                                       type(reloadable).__name__]}))
    """, str(tmp_path))
    assert not found["ran_at_import"]
    assert "helper (deferred by sparktf until its first use) failed to load: RuntimeError: " \
           "first run fails" in found["first"] and "RuntimeError" in found["first"]
    assert found["values"] == [2, 2, 2, 2] and found["runs"] == 2
    assert "broken (deferred" in found["broken"] and found["broken"].endswith("AttributeError")
    assert found["set"] == [10, 2]
    assert found["reloaded"] == [True, 1, False, "module"]  # run by reload, then plain


def test_tensorflow_without_keras_scores_a_keras_export_and_keras_imports_after(tmp_path):
    """A scoring worker's ``import tensorflow`` (``without_keras``): Keras is not imported,
    a Keras 3 export scores as in this process, ``tensorflow.__path__`` is what a plain
    import makes, and ``from tensorflow.keras import layers`` and ``import keras`` work
    after it."""
    import keras
    import numpy as np
    import tensorflow as tf

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((None, 3)), keras.layers.Masking(0.0),
                              keras.layers.GRU(4, go_backwards=True), keras.layers.Dense(2)])
    model.export(str(tmp_path / "export"), verbose=False)
    x = np.random.default_rng(0).normal(size=(5, 6, 3)).astype("float32")
    found = _python("""
        import json, sys, time
        import numpy as np
        t = time.process_time()
        from sparktf.runtime.worker_tuning import without_keras
        without_keras.import_tensorflow()
        cpu = time.process_time() - t
        import tensorflow as tf
        keras_after_import = "keras" in sys.modules
        serve = tf.saved_model.load(sys.argv[1]).signatures["serving_default"]
        x = np.asarray(json.loads(sys.argv[2]), "float32")
        scores = {k: v.numpy().tolist() for k, v in serve(tf.constant(x)).items()}
        keras_after_scoring = "keras" in sys.modules
        path = list(tf.__path__)
        from tensorflow.keras import layers
        import keras
        print(json.dumps({"cpu": cpu, "keras_after_import": keras_after_import,
                          "keras_after_scoring": keras_after_scoring, "scores": scores,
                          "path": path, "layers": layers.Dense is keras.layers.Dense,
                          "tf_keras": tf.keras.layers.Dense is keras.layers.Dense}))
    """, str(tmp_path / "export"), json.dumps(x.tolist()))
    print(f"\nimport tensorflow without Keras: {found['cpu']:.2f} s of CPU")
    assert not found["keras_after_import"] and not found["keras_after_scoring"]
    [ours] = found["scores"].values()
    np.testing.assert_array_equal(np.float32(ours), model.predict(x, verbose=0))
    assert found["path"] == list(tf.__path__)
    assert found["layers"] and found["tf_keras"]
