"""The whole pipeline, above its stages: ``python -m quotecite demo`` (``make demo``) runs documents -> reward ->
evaluation on a generated sample, and ``python -m quotecite plugins`` lists every stage's registered plug-ins.

The stages are packages of their own, layered bottom-up: :mod:`data_prep` (documents, blocks, embeddings, data
sets), :mod:`reward` (quotes -> regions -> judge -> reward), :mod:`eval` (inference, metrics, reports). A stage
imports only from the stages below it; this package is the only one that imports them all.
"""
