"""Small constants copied to every CPU that reads them: TF's ``ReplicateConstantsPass``.

``tensorflow/core/common_runtime/replicate_constants_pass.cc`` (TF >= 2.13, on by default), run
after placement and before partitioning: a CPU ``Const`` of at most 16 elements (``kMaxSize``),
with more than one out-edge and no control out-edge, whose consumers sit on more than one target
CPU (the consumer's CPU, else CPU:0 of its task: ``_Devices.target_cpu``), is replaced by one copy
``<const>/replicate/_<n>`` per target CPU (in device-name order), each with the original's control
inputs. The copies then need no transfer to their consumers, and
:attr:`~placeviz.partition.PartitionResult.replicated` lists them.
"""

from __future__ import annotations

from placeviz.graph import CONTROL
from placeviz.partition.base import CONST_OPS, _PartitionerBase

REPLICATE_MAX_ELEMENTS = 16  # ReplicateConstantsPass kMaxSize


class _ConstReplication(_PartitionerBase):
    """The partitioner's constant replication (module docstring), after prune and before the
    control-flow step."""

    # ---------------------------------------------------------------------------- constants
    def replicate_constants(self) -> None:
        """TF's ReplicateConstantsPass (module docstring, step 2)."""
        import numpy as np

        ops, n = self.ops, self.n
        devs = self.devs
        const_ids = self.nodes_with_op(CONST_OPS)
        if not const_ids:
            return
        is_cpu_dev = np.array(devs.is_cpu + [False], dtype=bool)
        size = n + len(self.added) + 1
        is_const = np.zeros(size, dtype=bool)
        is_const[np.asarray(const_ids, dtype=np.int64)] = True
        is_const[:n] &= is_cpu_dev[self.dev_np]
        edges = np.nonzero(is_const[self.e_src] & self.kept_edge)[0]
        extra = [(k, a) for k, a in enumerate(self.added)
                 if a.kind == "fetch_send" and a.inputs[0][0] < n and is_const[a.inputs[0][0]]]
        if not len(edges) and not extra:
            return
        c = self.e_src[edges]
        ndev = len(devs.names)
        tgt_of_dev = np.array([devs.target_cpu(k) for k in range(ndev)] + [-1], dtype=np.int64)
        t = tgt_of_dev[self.dev_np[self.e_dst[edges]]]
        cnt = np.bincount(c, minlength=size)
        ctrl = np.bincount(c[self.e_slot[edges] == CONTROL], minlength=size)
        tmin = np.full(size, np.iinfo(np.int64).max, dtype=np.int64)
        tmax = np.full(size, -1, dtype=np.int64)
        np.minimum.at(tmin, c, t)
        np.maximum.at(tmax, c, t)
        for _k, a in extra:  # fetches of a constant
            ci = a.inputs[0][0]
            cnt[ci] += 1
            tt = int(tgt_of_dev[a.dev])
            tmin[ci] = min(tmin[ci], tt)
            tmax[ci] = max(tmax[ci], tt)
        cand = np.nonzero((cnt > 1) & (ctrl == 0) & (tmin != tmax) & (tmax >= 0))[0]
        if not len(cand):
            return
        by_const = np.argsort(c, kind="stable")
        c_sorted = c[by_const]
        counter = 0
        for ci in sorted(cand.tolist(), key=lambda i: int(self.rank[i])):
            value = self.nodes_pb[ci].attr.get("value")
            if value is None:
                continue
            shape = value.tensor.tensor_shape
            if shape.unknown_rank:
                continue
            elements = 1
            for d in shape.dim:
                elements *= max(d.size, 0)
            if elements > REPLICATE_MAX_ELEMENTS:
                continue
            pos = edges[by_const[np.searchsorted(c_sorted, ci):np.searchsorted(c_sorted, ci, side="right")]]
            tgts = tgt_of_dev[self.dev_np[self.e_dst[pos]]]  # target CPU of each out-edge
            groups = {tt: pos[tgts == tt] for tt in sorted(set(tgts.tolist()))}  # np.unique imports numpy.ma
            fetch_users: dict[int, list[int]] = {}
            for k, a in extra:
                if a.inputs[0][0] == ci:
                    fetch_users.setdefault(int(tgt_of_dev[a.dev]), []).append(k)
            for tt in fetch_users:
                groups.setdefault(tt, pos[:0])
            lo, hi = self.in_start[ci], self.in_start[ci + 1]
            ctrl_in = [int(s) for s in self.e_src[lo:hi].tolist()]
            dtype = self.out_type(ci, 0)
            placed = []
            for tt in sorted(groups, key=lambda d: devs.names[d]):
                name = f"{self.names[ci]}/replicate/_{counter}"
                counter += 1
                copy = self._add(name, ops[ci], tt, [[s, CONTROL] for s in ctrl_in], "replicate", ci, 0, dtype,
                                 int(self.rank[ci]))
                self.added[-1].copy_of = ci
                if len(groups[tt]):
                    self.e_src[groups[tt]] = copy
                for k in fetch_users.get(tt, ()):
                    self.added[k].inputs[0][0] = copy
                placed.append(devs.names[tt])
            self.keep_np[ci] = False
            self.kept_edge[lo:hi] = False
            self.replicated[self.names[ci]] = sorted(placed)
