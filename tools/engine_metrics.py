#!/usr/bin/env python3
# Figures of the engine's inside for a checkout: files naming OpKind::tanh outside tests, the longest
# functions under ops/ (signature to closing brace), the largest sources outside the kernels,
# the executor's lines, the getenv sites and the README's length. Usage: python3 tools/engine_metrics.py [DIR]
import os, re, subprocess, sys
d = sys.argv[1] if len(sys.argv) > 1 else "."
files = subprocess.check_output(['git', '-C', d, 'ls-files'], text=True).split()
src = [f for f in files if re.search(r'\.(h|cpp|inc|def)$', f)]
def read(f): return open(os.path.join(d, f), errors='replace').read()
lib = [f for f in src if not f.startswith(('tests/', 'fuzz/'))]
tanh = sorted(f for f in lib if 'OpKind::tanh' in read(f))
print('files naming OpKind::tanh outside tests:', len(tanh), tanh)
# functions: a line at column 0 (or a class member at 2) opening with '{' at its end, to the matching '}'
def functions(f):
    lines = read(f).split('\n'); out = []
    depth = 0; start = None
    i = 0
    while i < len(lines):
        l = lines[i]
        if depth == 0:
            if re.match(r'^[A-Za-z~]', l) and not re.match(r'^(namespace|struct|class|enum|template|using|#)', l):
                start = i
            if start is not None and re.search(r'\)\s*(const)?\s*(noexcept)?\s*(->\s*[\w:<>]+)?\s*\{\s*$', l):
                d = 0; j = i
                while j < len(lines):
                    d += lines[j].count('{') - lines[j].count('}')
                    if d <= 0: break
                    j += 1
                out.append((j - start + 1, f, start + 1, lines[start].strip()[:60])); i = j + 1; start = None
                continue
        if depth == 0 and l.startswith('namespace'): i += 1; continue
        depth_change = 0
        i += 1
    return out
ops = [f for f in lib if f.startswith('ops/') and f.endswith('.cpp')]
fs = sorted((x for f in ops for x in functions(f)), reverse=True)
print('longest functions in ops/:', fs[:5])
kern = ('gemm', 'simd', 'erf_table')
big = sorted(((len(read(f).split('\n')), f) for f in lib if not any(k in f for k in kern)), reverse=True)
print('largest source files outside the kernels:', big[:4])
ex = [f for f in lib if re.search(r'ops/.*executor', f)]
print('Executor files and lines:', sum(len(read(f).split('\n')) for f in ex), ex)
env = [(f, len(re.findall(r'getenv', read(f)))) for f in lib if 'getenv' in read(f)]
print('getenv sites:', env)
print('README lines:', len(read('README.md').split('\n')))
