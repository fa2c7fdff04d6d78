import re,sys,collections
f=sys.argv[1]; J=None
def ts(line):
    m=re.match(r'time=\S+T(\d+):(\d+):([\d.]+)Z',line); return int(m[1])*3600+int(m[2])*60+float(m[3])
W=collections.defaultdict(lambda: collections.Counter())
for line in open(f,errors='replace'):
    if 'fleet: p8 joined' in line:
        h,m,s=line[:8].split(':'); J=int(h)*3600+int(m)*60+int(s)
    if not line.startswith('time=') or J is None: continue
    t=ts(line)-J
    if t<0 or t>100: continue
    b='%03d-%03d'%(t//20*20,t//20*20+20)
    o=re.search(r'owner=(p\d)',line)[1]
    if 'trace.balance' in line and o!='p8':
        m=re.search(r'p8=(\d+)\(',line)
        if m:
            lo=int(re.search(r' lo=(\d+)',line)[1]); W[b]['plans']+=1; W[b]['p8_view_below_lo']+= int(m[1])<lo
            pl=re.search(r'plan="([^"]*)"',line)[1]
            for kv in pl.split():
                k,n=kv.split('=')
                if k==o+'>p8': W[b]['own_moves_to_p8']+=int(n)
    if 'lease over the fair share' in line and 'to=p8' in line: W[b]['handover_decided']+=1
    if 'msg="lease handed_off"' in line and 'to=p8' in line: W[b]['released_to_p8']+=1
    if 'trace.handoverFinished' in line and 'to=p8' in line: W[b]['decided_then_finished']+=1
    if 'trace.kidsTaken' in line and o!='p8':
        d=dict(re.findall(r'(\w+)=(\d+)',line)); W[b]['kids_taken_by_givers']+=int(d['taken_self']); W[b]['kids_at_givers']+=int(d['kids'])
    if 'trace.offerKids' in line and o!='p8':
        m=re.search(r'offered="([^"]*)"',line)
        for kv in m[1].split():
            k,n=kv.split('=')
            if k=='p8': W[b]['kids_offered_p8']+=int(n)
            else: W[b]['kids_offered_others']+=int(n)
    if 'trace.offer ' in line and o=='p8':
        oc=re.search(r'outcome=(\S+)',line)[1]; W[b]['p8_offer_'+oc]+=1
keys=['plans','p8_view_below_lo','own_moves_to_p8','handover_decided','decided_then_finished','released_to_p8','kids_at_givers','kids_taken_by_givers','kids_offered_p8','kids_offered_others','p8_offer_taken','p8_offer_not_its','p8_offer_refused','p8_offer_later']
print('window(s after join) '+' '.join(keys))
for b in sorted(W): print(b, ' '.join('%s=%d'%(k,W[b][k]) for k in keys))
