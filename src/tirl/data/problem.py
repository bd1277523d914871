"""The one problem type of tirl (:class:`Problem`): defined in :mod:`tirl.protocol.problem`, below both
``tirl.data`` and ``tirl.rollout`` in the package order, so the agent loop takes it too; re-exported here, its
public home (``tirl.data.Problem``)."""

from tirl.protocol.problem import Problem

__all__ = ["Problem"]
