"""The code of every MLflow model sparktf logs (MLflow's "models from code"): MLflow keeps
this file in the model and runs it when the model loads, instead of unpickling a Python
object (which MLflow warns of each time one is logged). The model's bindings come from its
artifacts (``tracking.SparkTFPyfunc.load_context``)."""

import mlflow

from sparktf.runtime import tf_startup

with tf_startup.quiet_start():  # the loading process's own console
    from sparktf.ml.tracking import SparkTFPyfunc

mlflow.models.set_model(SparkTFPyfunc(None))
