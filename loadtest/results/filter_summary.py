import json,sys,collections
rows=[json.loads(l) for l in open(sys.argv[1]) if '"record": "filter"' in l or '"record":"filter"' in l]
cases=[]
by=collections.defaultdict(dict)
for r in rows:
    if r.get('record')!='filter': continue
    key=r['case']
    if key not in cases: cases.append(key)
    by[key][(r['name'],r['threads'])]=r
names=['zoomd_planner','zoomd_exact','zoomd_match_scan','zoomd_filtered_preview','zoomd_post_filter','hnswlib_M32','faiss_ivf_hnsw_pq_refine']
short={'zoomd_planner':'planner','zoomd_exact':'exact','zoomd_match_scan':'match_scan','zoomd_filtered_preview':'filt_prev','zoomd_post_filter':'post_filt','hnswlib_M32':'hnswlib','faiss_ivf_hnsw_pq_refine':'faiss'}
print("%-36s %8s | "%("case","share") + " | ".join("%-20s"%short[n] for n in names))
for c in cases:
    d=by[c]
    any_r=next(iter(d.values()))
    cells=[]
    for n in names:
        r1=d.get((n,1)); r2=d.get((n,2))
        if not r1: cells.append("%-20s"%"-"); continue
        cells.append("%5.3f %5.0f/%5.0f   "%(r1['recall_at_10'],r1['qps'],r2['qps'] if r2 else 0))
    print("%-36s %7.3f%% | "%(c[:36],100*any_r['share']) + " | ".join(cells))
for l in open(sys.argv[1]):
    r=json.loads(l)
    if r.get('record')=='filter_mix':
        line="mix %dt: planner %.1f QPS, best single %s %.1f QPS, ratio %.2fx"%(r['threads'],r['planner_qps'],r['best_single'],r['best_single_qps'],r['planner_over_best_single'])
        if 'oracle_qps' in r:
            line+="; oracle %.1f QPS (oracle / best single %.2fx, planner / oracle %.2fx)"%(r['oracle_qps'],r['oracle_over_best_single'],r['planner_over_oracle'])
        print(line)
