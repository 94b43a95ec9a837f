# the YaRN folder's fingerprint (model/fingerprint.h) and an indexer folder that names it
import hashlib, json, struct, sys, os, shutil
mdir, src, dst = sys.argv[1:4]
h = hashlib.sha256(open(f"{mdir}/config.json", "rb").read())
names = {}
for f in sorted(os.listdir(mdir)):
    if f.endswith(".safetensors"):
        with open(f"{mdir}/{f}", "rb") as fh:
            n = struct.unpack("<Q", fh.read(8))[0]
            hdr = json.loads(fh.read(n))
        for k, v in hdr.items():
            if k != "__metadata__": names[k] = v
for k in sorted(names, key=lambda s: s.encode()):
    v = names[k]
    h.update(k.encode() + f" {v['dtype']} {','.join(str(d) for d in v['shape'])}\n".encode())
fp = h.hexdigest()
shutil.rmtree(dst, ignore_errors=True); shutil.copytree(src, dst)
c = json.load(open(f"{dst}/config.json")); old = c["base_fingerprint"]; c["base_fingerprint"] = fp
json.dump(c, open(f"{dst}/config.json", "w"), indent=2)
print("fingerprint", old[:12], "->", fp[:12])
