"""What each C tool puts on the wire, as engine protocols and pure pack/unpack helpers."""
