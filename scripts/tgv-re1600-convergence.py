"""The table of docs/validation.md, "Accuracy against resolution: the issue 23 defaults", from
the runs of scripts/tgv-re1600-convergence.sh unpacked in DIR (default: the current directory):
per resolution and solver, the worst |ΔK/K| against the 512³ spectral run to t = 10 and t = 20,
the peak of −dK/dt (central differences of K over the outputs) and its time against the
reference's at the same spacing, and max|ω| over the reference's. Usage: python3 THIS [DIR]"""
import bisect, csv, os, sys
os.chdir(sys.argv[1] if len(sys.argv) > 1 else ".")
def load(p):
    r = list(csv.DictReader(open(p)))
    return [{k: float(v) for k, v in row.items()} for row in r]
ref = load('tgv512/spectral/energy.csv')
rt = [r['t'] for r in ref]; rK = [r['K'] for r in ref]; rW = [r['max_vorticity'] for r in ref]
def interp(t, ts, ys):
    i = bisect.bisect_left(ts, t)
    if i < len(ts) and abs(ts[i]-t) < 1e-9: return ys[i]
    if i == 0: return ys[0]
    if i >= len(ts): return ys[-1]
    a = (t-ts[i-1])/(ts[i]-ts[i-1]); return ys[i-1]*(1-a)+ys[i]*a
def peak(ts, K):
    d = [(-(K[i+1]-K[i-1])/(ts[i+1]-ts[i-1]), ts[i]) for i in range(1, len(ts)-1)]
    return max(d)
print('ref peak (central diff of K at 0.05):', peak(rt, rK))
# reference central differences at the same 0.1 spacing
rt1 = [t for t in rt if abs(round(t*10)-t*10) < 1e-6]; rK1 = [interp(t, rt, rK) for t in rt1]
print('ref peak at 0.1 spacing:', peak(rt1, rK1), 'ref max|w| max', max(rW))
for name in ['tgv64', 'tgv96', 'tgv128', 'tgv192']:
    for solver in ['vortex', 'spectral']:
        v = load(f'{name}/{solver}/energy.csv')
        ts = [r['t'] for r in v]; K = [r['K'] for r in v]; W = [r['max_vorticity'] for r in v]
        errs = [(abs(k/interp(t, rt, rK)-1), t) for t, k in zip(ts, K)]
        e10 = max(e for e in errs if e[1] <= 10.0 + 1e-9)
        e20 = max(errs)
        signed = [(k/interp(t, rt, rK)-1) for t, k in zip(ts, K)]
        wr = [(w/interp(t, rt, rW), t) for t, w in zip(ts, W)]
        pk = peak(ts, K); rp = peak(rt1, rK1)
        print(f'{name:7s} {solver:8s} t_end={ts[-1]:.2f} maxerr t<=10 {e10[0]*100:.2f}% (t={e10[1]:.1f}) t<=20 {e20[0]*100:.2f}% (t={e20[1]:.1f}) '
              f'peak {pk[0]:.5f} ({(pk[0]/rp[0]-1)*100:+.1f}%) at t={pk[1]:.2f} ({pk[1]-rp[1]:+.2f}) '
              f'max|w|/ref max {max(wr)[0]:.2f} (t={max(wr)[1]:.1f}) min {min(wr)[0]:.2f}; K(20) {K[-1]:.6f} signed at end {signed[-1]*100:+.2f}%')
v = load('inv64/vortex/energy.csv'); K=[r['K'] for r in v]
print('inv64: K loss at t=3', 1-K[-1]/K[0], 'max rise', max(K[i+1]-K[i] for i in range(len(K)-1)))
