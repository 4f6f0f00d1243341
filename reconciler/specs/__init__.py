"""Loading and validation: files → documents (with FILE:LINE) → validated :class:`Spec`."""
