"""Sentence encoding shared by the detectors, the example store and training.

`sentence_encoder`: the one all-MiniLM-L6-v2 of the process (per-turn path);
`encoders`: the transformer weights guardian can fine-tune, found on disk by name;
`pair_classifier`: a fine-tuned encoder over (text, context) pairs, run as int8 (face acts,
chatbot replies);
`finetune`: the training loop every fine-tuning uses (training only, never imported
on the per-turn path). Nothing is re-exported here, so importing the package loads
neither torch nor a model.
"""
