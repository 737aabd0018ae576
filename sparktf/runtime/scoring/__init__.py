"""Scoring: ``TFModel.transform``'s Arrow UDF, with no cluster at all.

``inference`` scores a partition's Arrow batches (``score_arrays``) in a Python worker
that keeps its loaded models (``saved_models``: the SavedModel cache, signatures, what fit
wrote beside them); ``batching`` turns rows into signature calls (full calls across Arrow
batches, rows of an input of length None by length, ``length_groups``, or padded where
the model masks its padding, ``padding``); ``outputs`` turns the calls' outputs into
columns (predictions, probabilities, nulls). Imports the feed (column kinds, tensors),
``worker_tuning``, ``storage`` and ``gpu``; never the process model or training.
"""
