#!/usr/bin/env python3
"""How many leaves of tree_index one observation needs, and how many a warp of 32 needs, on the
pole_circle_1e-7rad input (float32 degrees: 2^20 references at latitude 90 - 2^-17 deg, random
longitudes; 2^20 uniform observations): float64 unit vectors, the references in the tree's 126-bit
Morton order, leaves of 16, observations in the 30-bit Morton order of the search; a leaf is needed when
it holds a reference within 1e-14 (the float64 tests' margin, in squared chord) of the nearest. Prints
the mean leaves per observation and per warp over 300 random warps (numpy, a few minutes on one core).

With --regroup [KINDS] it also orders the observations by the leaf a descent from the root reaches, going
to the child whose box is nearer ("box", as the experiment of the eleventh session did), whose segment
from its first to its last reference is nearer ("segment") or whose middle reference in sorted order is
nearer ("middle"); KINDS: a comma-separated list of them, all three by default. It prints for each order
how far that leaf lies from the leaf of the nearest reference and the leaves a warp of that order needs.
"""
import sys
import numpy as np
from tree_walk_sim import spread, unit  # the same unit vectors and Morton bit spreading
rng=np.random.default_rng(1)
M=1<<20; N=1<<20
lat_r=np.float32(90-1e-7*180/np.pi); lon_r=rng.uniform(-180,180,M).astype(np.float32)
R=unit(np.full(M,lat_r),lon_r)
cells=np.floor((R+1)*0.5*2.0**42).astype(np.uint64)
hi=[c>>np.uint64(21) for c in cells.T]; lo=[c&np.uint64((1<<21)-1) for c in cells.T]
H=(spread(hi[0])<<np.uint64(2))|(spread(hi[1])<<np.uint64(1))|spread(hi[2])
Lw=(spread(lo[0])<<np.uint64(2))|(spread(lo[1])<<np.uint64(1))|spread(lo[2])
order=np.lexsort((np.arange(M),Lw,H))
Rs=R[order]; leaf_of_sorted=np.arange(M)//16
print("distinct primary keys",len(np.unique(H)))
# observations uniform
z=rng.uniform(-1,1,N); lon=rng.uniform(-np.pi,np.pi,N)
olat=np.degrees(np.arcsin(z)).astype(np.float32); olon=np.degrees(lon).astype(np.float32)
O=unit(olat,olon)
oc=np.floor((O+1)*0.5*1024).clip(0,1023).astype(np.uint64)
ok=(spread(oc[:,0])<<np.uint64(2))|(spread(oc[:,1])<<np.uint64(1))|spread(oc[:,2])
oo=np.argsort(ok,kind='stable'); O=O[oo]
warps=rng.choice(N//32,300,replace=False)
def warp_leaves(P):
    """The leaves each of the warp's observations P needs, and the leaf of each one's nearest reference."""
    c2=((P[:,None,:]-Rs[None,:,:])**2).sum(-1)  # 32 x M
    need=c2<=c2.min(1,keepdims=True)+1e-14
    return [set(leaf_of_sorted[np.nonzero(r)[0]]) for r in need],leaf_of_sorted[c2.argmin(1)]
own=[];uni=[]
for w in warps:
    sets,_=warp_leaves(O[w*32:(w+1)*32])
    own.append(np.mean([len(s) for s in sets])); uni.append(len(set().union(*sets)))
print("own leaves per thread mean",np.mean(own),"union per warp mean",np.mean(uni),"p90",np.percentile(uni,90),"max",np.max(uni))

if "--regroup" in sys.argv:
    leaves=M//16
    # Each level's boxes and segments (first and last reference in sorted order), leaves first.
    levels=[]
    low=Rs.reshape(leaves,16,3).min(1); high=Rs.reshape(leaves,16,3).max(1)
    first=Rs[0::16]; last=Rs[15::16]
    while True:
        levels.append((low,high,first,last))
        if len(low)==1: break
        low=np.minimum(low[0::2],low[1::2]); high=np.maximum(high[0::2],high[1::2])
        first=first[0::2]; last=last[1::2]
    levels=levels[::-1]  # root first
    def box_d2(P,lo,hi):
        d=np.maximum(np.maximum(lo-P,P-hi),0.0); return (d*d).sum(-1)
    def seg_d2(P,a,b):
        u=b-a; w=P-a; uu=(u*u).sum(-1); t=np.where(uu>0,(w*u).sum(-1)/np.where(uu>0,uu,1),0).clip(0,1)
        r=w-t[:,None]*u; return (r*r).sum(-1)
    def descend(P,kind):
        at=np.zeros(len(P),dtype=np.int64)
        for depth,(lo,hi,a,b) in enumerate(levels[1:],1):
            l=2*at; r=l+1
            if kind=="box": dl,dr=box_d2(P,lo[l],hi[l]),box_d2(P,lo[r],hi[r])
            elif kind=="segment": dl,dr=seg_d2(P,a[l],b[l]),seg_d2(P,a[r],b[r])
            else:  # the middle reference of each child, in sorted order
                span=M>>depth
                dl=((P-Rs[l*span+span//2])**2).sum(-1); dr=((P-Rs[r*span+span//2])**2).sum(-1)
            at=np.where(dr<dl,r,l)
        return at
    kinds=sys.argv[sys.argv.index("--regroup")+1].split(",") if len(sys.argv)>sys.argv.index("--regroup")+1 else ["box","segment","middle"]
    for kind in kinds:
        key=np.concatenate([descend(O[i:i+65536],kind) for i in range(0,N,65536)])
        ro=np.argsort(key,kind='stable'); Ok=O[ro]; keyk=key[ro]
        off=[];uk=[]
        for w in warps:
            sets,nearest=warp_leaves(Ok[w*32:(w+1)*32])
            off.extend(np.abs(nearest-keyk[w*32:(w+1)*32]))
            uk.append(len(set().union(*sets)))
        print(kind,"descent: leaves from the nearest reference's leaf: median",np.median(off),"p90",np.percentile(off,90),
              "| observations in that order, union per warp mean",np.mean(uk),"p90",np.percentile(uk,90),"max",np.max(uk))
