"""Analyses of saved trajectories (``tirl analyze``): token entropy (:mod:`tirl.analysis.entropy`)."""
