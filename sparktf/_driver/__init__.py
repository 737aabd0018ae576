"""The driver's machinery (internal): launching a barrier stage (``launch``), what the
tasks' events do there (``events``), the checks
before it (``checks``, ``schema``, ``resources``), how the input reaches it (``routing``),
the session it runs in (``sessions``), what a failure means (``failures``), and the
user's function on its way to the executors (``pickling``)."""
