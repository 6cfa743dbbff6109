"""The parts of a generator / scorer / learner pipeline (GRPO-style post-training), each testable alone.

* :mod:`.task` — a contextual bandit whose scorer knows the best action, so learning is verifiable;
* :mod:`.policy` — the policy network with every parameter in one flat buffer (weights travel as one array);
* :mod:`.slices` — what flows between stages: a group of G sampled actions per state;
* :mod:`.roles` — the Generator, the Scorer and the Learner (group-relative PPO with a KL penalty to a frozen
  reference);
* :mod:`.replay` — a replay that favours slices from newer policy versions;
* :mod:`.timeline` — each actor's phases (busy, waiting, syncing weights) as wall-clock spans.

The engines in :mod:`rlbench.engines` place these parts in processes or actors and move data between them.
"""
