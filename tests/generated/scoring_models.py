"""SavedModels for the generated column cases: each input returned flattened as float64
(a string as its byte length), so that ``transform`` and ``udf()`` can be compared with
the NumPy reference row by row."""

import tensorflow as tf


def _flat(x):
    if x.dtype == tf.string:
        x = tf.strings.length(x)
    x = tf.cast(x, tf.float64)
    return tf.reshape(x, [tf.shape(x)[0], -1])


def save(path: str, inputs: dict[str, tuple], first_only: bool = False) -> None:
    """``inputs``: name -> (dtype name, row shape). Outputs ``o_<name>`` (float64 rows),
    or with ``first_only`` one scalar output ``y``: the first input's first value."""
    names = list(inputs)
    specs = [tf.TensorSpec((None, *shape), tf.as_dtype(dtype), name=name)
             for name, (dtype, shape) in inputs.items()]

    class Flatten(tf.Module):
        @tf.function(input_signature=specs)
        def serve(self, *xs):
            if first_only:
                return {"y": _flat(xs[0])[:, 0]}
            return {f"o_{n}": _flat(x) for n, x in zip(names, xs)}

    module = Flatten()
    tf.saved_model.save(module, path, signatures={"serving_default": module.serve})
