"""What the examples share: the corpus (this repository's own README and
docs, read character by character: nothing downloaded), a tiny next-character
model, its parameters as one flat tensor, and the gnuplot figure.
"""

import glob
import hashlib
import math
import os
import shutil
import subprocess

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


class Corpus:
    """README.md and docs/*.md of this repository as one character stream;
    the last tenth is held out for the evaluation loss."""

    def __init__(self, context=16):
        paths = [os.path.join(REPO, "README.md")] + sorted(glob.glob(os.path.join(REPO, "docs", "*.md")))
        text = "".join(open(p, encoding="utf-8").read() for p in paths)
        self.vocab = sorted(set(text))
        index = {c: i for i, c in enumerate(self.vocab)}
        data = torch.tensor([index[c] for c in text], dtype=torch.int64)
        cut = len(data) * 9 // 10
        self.train, self.held_out = data[:cut], data[cut:]
        self.context = context
        # A fixed evaluation set, the same on every process: windows evenly
        # spaced over the held-out text.
        starts = torch.linspace(0, len(self.held_out) - context - 1, 512).long()
        self.eval_x, self.eval_y = self._windows(self.held_out, starts)

    def _windows(self, data, starts):
        offsets = torch.arange(self.context)
        return data[starts[:, None] + offsets], data[starts + self.context]

    def batch(self, size, generator):
        """``size`` random training windows (inputs, next characters)."""
        starts = torch.randint(0, len(self.train) - self.context - 1, (size,), generator=generator)
        return self._windows(self.train, starts)


class CharMLP(torch.nn.Module):
    """Next character from the previous ``context`` ones: embeddings,
    concatenated, one hidden layer (Bengio et al. 2003, in miniature)."""

    def __init__(self, vocab_size, context=16, embed=16, hidden=128):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab_size, embed)
        self.hidden = torch.nn.Linear(context * embed, hidden)
        self.out = torch.nn.Linear(hidden, vocab_size)

    def forward(self, x):
        return self.out(torch.tanh(self.hidden(self.embed(x).flatten(1))))


def loss_on(model, x, y):
    return torch.nn.functional.cross_entropy(model(x), y)


def train_step(model, opt, corpus, batch, generator):
    """One optimiser step on a random batch; returns its loss."""
    x, y = corpus.batch(batch, generator)
    opt.zero_grad()
    loss = loss_on(model, x, y)
    loss.backward()
    opt.step()
    return loss.item()


def flatten_params(model):
    """Moves the model's parameters into one flat float32 tensor and makes
    each parameter a view of it, so that the whole model is one buffer to
    copy, hash and all-reduce. Returns the flat tensor."""
    params = list(model.parameters())
    flat = torch.cat([p.detach().reshape(-1) for p in params]).clone()
    offset = 0
    for p in params:
        n = p.numel()
        p.data = flat[offset:offset + n].view_as(p)
        offset += n
    return flat


def digest(tensor):
    """A short hash of a tensor's bytes, for comparing models across
    processes."""
    return hashlib.blake2b(tensor.detach().contiguous().numpy().tobytes(), digest_size=8).hexdigest()


def plot(png, title, panels):
    """Draws ``panels`` side by side into ``png`` with gnuplot. A panel is a
    dict: xlabel, ylabel, curves [(title, [(x, y), ...])], marks
    [(x, label)] drawn as vertical lines (kills and joins). Returns False,
    having drawn nothing, where gnuplot is not installed."""
    gnuplot = shutil.which("gnuplot")
    if not gnuplot:
        return False
    lines = ["set terminal pngcairo size %d,480 noenhanced" % (640 * len(panels)),
             "set output '%s'" % png.replace("'", "''"),
             "set multiplot layout 1,%d title '%s'" % (len(panels), title.replace("'", "''"))]
    blocks = []
    for p, panel in enumerate(panels):
        lines += ["unset arrow", "unset label", "set grid", "set key top right",
                  "set xlabel '%s'" % panel["xlabel"], "set ylabel '%s'" % panel["ylabel"]]
        for x, label in panel.get("marks", ()):
            color = "red" if label.startswith("kill") else "dark-green"
            lines.append("set arrow from %g, graph 0 to %g, graph 1 nohead dt 2 lw 2 lc rgb '%s'" % (x, x, color))
            lines.append("set label '%s' at %g, graph 0.04 left offset 0.3,0 tc rgb '%s'" % (label, x, color))
        plots = []
        for c, (name, points) in enumerate(panel["curves"]):
            block = "$d%d_%d" % (p, c)
            blocks += ["%s << EOD" % block] + ["%r %r" % (x, y) for x, y in points
                                               if not (isinstance(y, float) and math.isnan(y))] + ["EOD"]
            plots.append("%s using 1:2 with linespoints pt 7 ps 0.5 title '%s'" % (block, name))
        lines.append("plot " + ", ".join(plots))
    lines.append("unset multiplot")
    subprocess.run([gnuplot], input="\n".join(blocks + lines) + "\n", text=True, check=True, timeout=60)
    return True
