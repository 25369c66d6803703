"""Stage ``wire``: the native core's Python face (``core``): captures or live frames in,
Arrow tables of pairs, or exchanges with raw payloads, out."""
