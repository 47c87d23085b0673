"""Fakes that ship with the package: fake providers and platform servers on loopback, a recording host."""
