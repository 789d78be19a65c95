"""Pure numerical core of fedep.

Arrays in, arrays and diagnostics out: no I/O, no printing, no global random state.
Every function here works on one client or on a stack of clients; the federation
runners (:mod:`fedep.federation`) decide who holds which array.
"""
