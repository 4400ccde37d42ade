"""The lab's tiny language model: corpus and windows (data), the Transformer (model), the
committed pre-training artifacts (artifacts) and one update under each averaging rule
(branches). Pre-train with `python -m pclab.experiments.transformer.pretrain`; run the
experiment with `pclab run transformer --json`."""
