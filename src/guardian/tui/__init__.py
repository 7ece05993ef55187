"""The terminal chat monitor (Textual): one widget per module, styles in guardian.tcss."""
