"""Importing this module warms up the reward worker; list it in a sandbox pool's preload.

A sandbox worker imports its preload modules once and forks a child per call, so whatever is warm in the
worker is warm in every child: this module runs :func:`tirl.reward.worker.warm_up` (math-verify's regexes,
the LaTeX parser, sympy's caches) at import. A cold child spends about 0.1 s more on its first comparison.
Importing :mod:`tirl.reward.worker` alone (what a child does when the pool did not preload it) skips this.
It has no API.
"""

from tirl.reward.worker import warm_up

warm_up()
