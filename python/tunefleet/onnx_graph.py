"""ONNX graph walks and rewrites the farm makes before TVM's ONNX frontend, shared by
the model driver and the tests.

Importing the module needs `onnx` only when a rewrite runs."""

from __future__ import annotations


def used_names(graph) -> set:
    """Every value name read by a node (subgraphs included) or output by the graph."""
    used = set(o.name for o in graph.output)
    stack = [graph]
    while stack:
        g = stack.pop()
        for node in g.node:
            used.update(x for x in node.input if x)
            for a in node.attribute:
                if a.HasField("g"):
                    stack.append(a.g)
                stack.extend(a.graphs)
    return used


def canonicalize_for_layout(model) -> int:
    """Rewrites, in place, the two ONNX operators whose Relax form TVM 0.27's
    `ConvertLayout` cannot carry a layout through: `Sum` of two or more
    (lowered to stack + sum, a 5-D tensor with no layout) becomes a chain
    of `Add`s, and an inference `Dropout` (its Relax form returns a tuple)
    becomes `Identity`. Both are exact. Only NHWC runs call it, so the
    tasks of NCHW runs keep their workload keys. Returns the nodes
    rewritten."""
    from onnx import helper

    used = used_names(model.graph)
    nodes = []
    rewritten = 0
    for n in model.graph.node:
        standard = n.domain in ("", "ai.onnx")
        training = len(n.input) > 2 and n.input[2] != ""
        mask_used = len(n.output) > 1 and n.output[1] in used
        if standard and n.op_type == "Dropout" and not training and not mask_used:
            nodes.append(helper.make_node("Identity", [n.input[0]], [n.output[0]], name=n.name))
            rewritten += 1
        elif standard and n.op_type == "Sum" and len(n.input) >= 2:
            acc = n.input[0]
            for k, x in enumerate(n.input[1:]):
                out = n.output[0] if k == len(n.input) - 2 else f"{n.output[0]}__tunefleet_sum{k}"
                nodes.append(helper.make_node("Add", [acc, x], [out], name=f"{n.name}__tunefleet_add{k}"))
                acc = out
            rewritten += 1
        else:
            nodes.append(n)
    if rewritten:
        del model.graph.node[:]
        model.graph.node.extend(nodes)
    return rewritten
