"""The off-policy side of bounded-staleness rollouts (``rollout.max_staleness``, issue 42): the importance
correction of stale tokens and the step's lag metrics.

**The correction** (:func:`staleness_weights`): the generator's per-token log-probs are the behaviour policy; the
trainer's log-probs before the update (the no-grad forward pass TRL makes for its old log-probs) are the current
policy; each model token's loss is multiplied by ``min(pi / mu, C)`` (``token_truncate``) or its trajectory is
left out when ``prod pi / mu`` is outside [1/C, C] (``sequence_mask``). The PPO ratio then runs against the
trainer's pre-update policy (decoupled PPO, as in AReaL). Its metrics: mismatch KL, effective sample size,
clipped share. :func:`lag_metrics` is the step's lag histogram.

Admission control (which batch is generated when, on which weights) is :mod:`tirl.rollout.staleness`; the TRL
glue that applies both is :mod:`tirl.train.rollout_func` and :mod:`tirl.train.trainer`.

Framework-free apart from :func:`staleness_weights` (torch, imported when called).
"""

from __future__ import annotations

from typing import Any


def lag_metrics(staleness: int, tokens: int, max_staleness: int) -> dict[str, float]:
    """The step's staleness histogram, token-weighted, in optimizer steps: ``stale/lag_J`` = the share of this
    process's model tokens generated J versions behind the trainer (J = 0..k; one batch per process and step, so
    one bin is 1; averaged over processes by TRL's logging), and ``stale/lag_mean``."""
    out = {f"stale/lag_{j}": float(j == staleness and tokens > 0) for j in range(max_staleness + 1)}
    out["stale/lag_mean"] = float(staleness)
    return out


def staleness_weights(
    trainer_logps: Any, behaviour_logps: Any, mask: Any, *, mode: str, cap: float
) -> tuple[Any, dict[str, float]]:
    """Importance weights of stale tokens and the step's off-policy metrics.

    Args:
        trainer_logps: (B, T) log-probs of the sampled tokens under the trainer's policy before the update (nats).
        behaviour_logps: (B, T) the generator's log-probs of the same tokens (nats; NaN where a server gave none).
        mask: (B, T) 1 on model tokens that enter the loss (tool tokens and padding 0).
        mode: ``token_truncate`` (weight ``min(ratio, cap)`` per token) or ``sequence_mask`` (weight 1, or 0 for
            every token of a row whose ratio product is outside [1/cap, cap]).
        cap: C > 1.

    Returns:
        ``(weights, metrics)``: weights (B, T), 0 off the mask, detached (a masked-in token without a generator
        log-prob gets ratio 1: kept as on-policy, left out of the metrics); metrics ``stale/mismatch_kl`` (the k3
        estimate of KL(behaviour || trainer) per model token, nats), ``stale/ess`` (the normalised effective sample
        size of the raw token ratios, (sum w)^2 / (n sum w^2), in (0, 1]; 1 = on-policy), ``stale/is_clipped``
        (share of model tokens whose weight the cap changed: truncated, or masked with their row) and
        ``stale/ratio_max``.

    Raises:
        ValueError: an unknown mode.
    """
    import torch

    if mode not in ("token_truncate", "sequence_mask"):
        raise ValueError(f"unknown staleness correction {mode!r} (token_truncate or sequence_mask)")
    m = mask.bool() & ~torch.isnan(behaviour_logps)
    # a token without a generator log-prob is taken as on-policy (ratio 1): no weight is invented for it
    log_ratio = torch.where(m, trainer_logps.detach().float() - behaviour_logps.float(), torch.zeros(()))
    log_ratio = log_ratio.clamp(-20.0, 20.0)  # exp stays finite; such a token is clipped or masked anyway
    ratio = torch.exp(log_ratio)
    if mode == "token_truncate":
        weights = torch.clamp(ratio, max=cap)
        clipped = (ratio > cap) & m
    else:
        seq = log_ratio.sum(-1, keepdim=True)
        keep = (seq >= -torch.log(torch.tensor(cap))) & (seq <= torch.log(torch.tensor(cap)))
        weights = keep.to(ratio.dtype).expand_as(ratio).clone()
        clipped = ~keep.expand_as(m) & m  # counted over tokens with a log-prob, as every metric here
    weights = torch.where(mask.bool(), weights, torch.zeros(()))  # a NaN token keeps weight 1 (ratio taken as 1)
    n = int(m.sum().item())
    metrics: dict[str, float] = {}
    if n:
        r = ratio[m]
        metrics["stale/mismatch_kl"] = float((r - 1.0 - log_ratio[m]).mean().item())
        metrics["stale/ess"] = float((r.sum() ** 2 / (n * (r**2).sum())).item())
        metrics["stale/is_clipped"] = float(clipped.sum().item()) / n
        metrics["stale/ratio_max"] = float(r.max().item())
    return weights.detach(), metrics


__all__ = ["lag_metrics", "staleness_weights"]
