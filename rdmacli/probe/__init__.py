"""The probe layer: a fabric's latency and loss by timestamped UD datagrams, beneath `rdmacli mesh
--test probe` and `rdmacli watch` (R-Pingmesh's shape).

Each NIC opens one UD QP on its rail's listening cm_id (UDP port space) and, during one phase,
probes every partner NIC it is given, all at once, rate-limited, while answering its partners'
probes on the same QP. A partner's QP number comes from rdma_cm's SIDR (udaddy's exchange): one
short exchange per partner, no QP, connection or memory per pair. The responder stamps when it
took a probe from its CQ and when it posts the reply, so its hold is taken out of the round trip.
A probe not answered by the phase's end is lost: UD does not retransmit.

Modules, from the wire up: `wire` (the datagram, laid out by the C header), `timing` (the
phase's arithmetic, pure), `tally` (one partner's counts and the verdict on them), `nic` with its
two halves `sidr` and `datagrams` (one NIC's phase on the stack), `phase` (every rail of a node at
once). Knows nothing of the mesh's plan or watch's windows: each front-end gives a `phase.Topology`
and reads `phase.Result`s.
"""
