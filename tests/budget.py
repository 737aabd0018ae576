"""How many cases the generated unit tests draw (Hypothesis's ``max_examples``).

``make test`` draws the given number in its main run. Its runs at the lowest and the
newest versions (``SPARKTF_VERSION_RUN=1``, set by the Makefile's ``VERSION_RUN``) repeat
every unit test in another environment, and draw a third of them: what differs between
environments is reached by the first draws (the explicit examples and the shrunk cases),
and the main run draws the rest."""

import os

VERSION_RUN = os.environ.get("SPARKTF_VERSION_RUN") == "1"


def examples(n: int) -> int:
    """``n`` in the main run; a third (at least 5) in a version run."""
    return max(5, n // 3) if VERSION_RUN else n
