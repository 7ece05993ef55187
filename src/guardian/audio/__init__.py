"""Live voice call screening: audio sources, VAD, Whisper transcription, speaker attribution.

Nothing heavy is imported here; models load on first use.
"""
