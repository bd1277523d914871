"""Reading finished runs (``tirl plot``, ``tirl analyze``), each module on :mod:`tirl.runs`: training and held-out
curves (:mod:`tirl.analysis.plot`), the per-step table (:mod:`tirl.analysis.step_table`), an ablation's report over
seeds (:mod:`tirl.analysis.ablation`), token entropy (:mod:`tirl.analysis.entropy`), the offline RoC replay
(:mod:`tirl.analysis.roc_replay`), a recomputed step against its logs (:mod:`tirl.analysis.step_replay`,
for ``tirl train replay``) and reference solutions written as a run (:mod:`tirl.analysis.reference`)."""
