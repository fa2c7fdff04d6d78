import re,collections,sys
f=sys.argv[1]; J=None
ho={}    # shard -> (t, giver)
hoff={}  # shard -> t handed_off (release landed)
fin=collections.defaultdict(list)  # shard -> [(t, owner)]
offers=collections.defaultdict(list) # shard -> [(t,outcome,owner,...)]
kid={}   # not available per shard
def ts(line):
    m=re.match(r'time=\S+T(\d+):(\d+):([\d.]+)Z',line); return int(m[1])*3600+int(m[2])*60+float(m[3])
for line in open(f,errors='replace'):
    if 'fleet: p8 joined' in line:
        h,m,s=line[:8].split(':'); J=int(h)*3600+int(m)*60+int(s)
    if not line.startswith('time='): continue
    d=dict(re.findall(r'(\w+)=("[^"]*"|\S+)',line))
    t=ts(line)-(J or 0)
    o=d.get('owner')
    if 'lease over the fair share' in line and d.get('to')=='p8': ho[d['shard']]=(t,o)
    elif 'msg="lease handed_off"' in line and d.get('to')=='p8': hoff[d['shard']]=(t,o)
    elif 'shard finished' in line: fin[d['shard']].append((t,o))
    elif d.get('msg')=='trace.offer' and o=='p8': offers[d['shard']].append((t,d['outcome'],d['lease_owner'],d['lease_finished'],d['mine'],d['finished_known'],d['read']))
print('hand-over decisions to p8:',len(ho),' released to p8 (handed_off):',len(hoff))
cat=collections.Counter(); ex=collections.defaultdict(list)
for s,(t,g) in ho.items():
    if s in hoff:
        oo=offers.get(s,[])
        k='released; p8 offer outcomes: '+(','.join(x[1] for x in oo) or 'NONE')
    else:
        ff=[x for x in fin.get(s,[]) if x[0]>=t]
        k='not released to p8; finished by %s'%(ff[0][1] if ff else 'nobody seen')
    b='<+25s' if t<25 else '>=+25s'
    cat[(b,k)]+=1; ex[(b,k)].append(s)
for k,v in sorted(cat.items()): print(v,k)
