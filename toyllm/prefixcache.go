package toyllm

import (
	"encoding/binary"
	"hash/maphash"
	"sync"
)

// DefaultBlockSize is the prefix cache's block size in tokens when
// Options.BlockSize is 0, vLLM's default on GPUs.
const DefaultBlockSize = 16

// prefixCache is the stand-in's model of vLLM's automatic prefix cache (the
// V1 engine's KV cache manager), without the tensors: which blocks of
// tokens a server holds, so that a request knows how much of its prompt it
// need not compute.
//
// The KV cache is capacity blocks of blockSize tokens. Only full blocks are
// cached, each under a hash of its tokens chained with its parent block's
// hash, so that a block is found only under the very prefix it was computed
// after. A request's hit is the run of its prompt's leading full blocks
// found in the cache, as vLLM capped at len(prompt)-1 tokens: the last
// prompt token is always computed, for its logits. The blocks a running
// request holds (its hits, the rest of its prompt's full blocks, the block
// of its prompt's last partial tokens) are pinned by a reference count; a
// cached block no request holds is free, and the least recently used free
// block is evicted when a new one is needed. When every block is pinned, a
// request's remaining blocks are not held, and so not cached. As in vLLM, a
// finished request caches the full blocks its generated tokens completed,
// all but the last token (sampled, never fed back), so that the next turn,
// which sends the conversation again with more on it, finds it all, and
// releases its blocks last first, so that a conversation's tail is evicted
// before its head.
//
// Like vLLM it counts queries, the prompt tokens of every request looked
// up, and hits, the tokens found. Hashes are 64-bit: distinct prefixes
// collide with negligible probability, as with vLLM's. A nil *prefixCache is
// a disabled cache: it finds and counts nothing. It is safe for concurrent
// use: hashing happens outside its one lock.
type prefixCache struct {
	blockSize int
	capacity  int // in blocks
	seed      maphash.Seed

	mu sync.Mutex
	// blocks are the slots of the KV cache, allocated as needed up to
	// capacity; blocks[0] is the head of the free list, in least recently
	// used order.
	blocks        []kvBlock
	byHash        map[uint64]int32 // the cached (full) blocks
	spare         []int32          // slots of released partial blocks, for reuse
	free          int              // cached blocks no request holds: the free list's length
	queries, hits int64
}

// kvBlock is one block of the KV cache.
type kvBlock struct {
	hash   uint64
	hashed bool  // a full block, in byHash
	refs   int32 // the running requests holding it
	// prev and next link a free block into the free list.
	prev, next int32
}

// kvSeq is one request's hold on the cache, between start and finish. Its
// buffers are reused by the next request that uses it.
type kvSeq struct {
	held    []int32 // the full blocks held, in order
	partial int32   // the slot held for the partial block, 0 for none
	parent  uint64  // the hash of the last full block
	tail    []int32 // the tokens after the last full block
	stopped bool    // the cache was full: no more blocks are held
	hashes  []uint64
	buf     []byte
}

// oversized reports whether the sequence's buffers grew past what a pooled genState keeps.
func (q *kvSeq) oversized() bool {
	return cap(q.tail) > maxPooledBytes/4 || cap(q.held) > maxPooledBytes/4 ||
		cap(q.hashes) > maxPooledBytes/8 || cap(q.buf) > maxPooledBytes
}

// newPrefixCache returns a cache of capacityTokens tokens in blocks of
// blockSize, or nil (disabled) when that is less than one block.
func newPrefixCache(capacityTokens, blockSize int) *prefixCache {
	if blockSize <= 0 || capacityTokens < blockSize {
		return nil
	}
	return &prefixCache{
		blockSize: blockSize,
		capacity:  capacityTokens / blockSize,
		seed:      maphash.MakeSeed(),
		blocks:    make([]kvBlock, 1),
		byHash:    make(map[uint64]int32),
	}
}

// start looks prompt up, counts the query and its hit, and holds the
// prompt's blocks in seq until finish: the hit ones and, cached now, the
// rest. It returns the hit in tokens, a multiple of the block size.
func (c *prefixCache) start(seq *kvSeq, prompt []int32) int {
	if c == nil {
		return 0
	}
	full := len(prompt) / c.blockSize * c.blockSize
	seq.held, seq.partial, seq.stopped = seq.held[:0], 0, false
	seq.tail = append(seq.tail[:0], prompt[full:]...)
	seq.parent = 0
	seq.hashes = seq.hashes[:0]
	c.hashBlocks(seq, prompt[:full])
	maxHit := (len(prompt) - 1) / c.blockSize

	c.mu.Lock()
	defer c.mu.Unlock()
	c.queries += int64(len(prompt))
	hit := 0
	for ; hit < maxHit; hit++ {
		i, ok := c.byHash[seq.hashes[hit]]
		if !ok {
			break
		}
		c.pin(i)
		seq.held = append(seq.held, i)
	}
	c.hits += int64(hit * c.blockSize)
	c.hold(seq, seq.hashes[hit:])
	if len(seq.tail) > 0 && !seq.stopped {
		if seq.partial = c.alloc(); seq.partial == 0 {
			seq.stopped = true
		}
	}
	return hit * c.blockSize
}

// finish caches the full blocks that output, the tokens generated after
// the prompt given to start, completed, and releases seq's blocks.
func (c *prefixCache) finish(seq *kvSeq, output []int32) {
	if c == nil {
		return
	}
	seq.hashes = seq.hashes[:0]
	if len(output) > 0 && !seq.stopped {
		seq.tail = append(seq.tail, output[:len(output)-1]...)
		full := len(seq.tail) / c.blockSize * c.blockSize
		c.hashBlocks(seq, seq.tail[:full])
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	// The partial block's slot goes first, so that the block it became
	// takes it again unless it is cached already.
	if seq.partial != 0 {
		c.unpin(seq.partial)
		seq.partial = 0
	}
	c.hold(seq, seq.hashes)
	for i := len(seq.held) - 1; i >= 0; i-- {
		c.unpin(seq.held[i])
	}
	seq.held = seq.held[:0]
}

// reset empties the cache, as vLLM's reset_prefix_cache, unless running
// requests hold blocks: then it does nothing and reports false.
func (c *prefixCache) reset() bool {
	if c == nil {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.usedLocked() > 0 {
		return false
	}
	c.blocks = c.blocks[:1]
	c.blocks[0] = kvBlock{}
	clear(c.byHash)
	c.spare, c.free = c.spare[:0], 0
	return true
}

// cacheStats is a snapshot of a prefix cache's counters and occupancy.
type cacheStats struct {
	queries, hits int64 // in tokens
	used          int   // blocks held by running requests
	capacity      int   // in blocks
}

// stats returns the cache's counters and occupancy.
func (c *prefixCache) stats() cacheStats {
	if c == nil {
		return cacheStats{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return cacheStats{queries: c.queries, hits: c.hits, used: c.usedLocked(), capacity: c.capacity}
}

// hashBlocks appends to seq.hashes the chained hashes of tokens' blocks
// (whole blocks), following seq.parent, which it advances.
func (c *prefixCache) hashBlocks(seq *kvSeq, tokens []int32) {
	for len(tokens) > 0 {
		b := binary.LittleEndian.AppendUint64(seq.buf[:0], seq.parent)
		for _, t := range tokens[:c.blockSize] {
			b = binary.LittleEndian.AppendUint32(b, uint32(t))
		}
		seq.buf = b
		seq.parent = maphash.Bytes(c.seed, b)
		seq.hashes = append(seq.hashes, seq.parent)
		tokens = tokens[c.blockSize:]
	}
}

// hold holds, for seq, the blocks of hashes in order, caching those not
// cached yet, until the cache is full. The caller holds c.mu.
func (c *prefixCache) hold(seq *kvSeq, hashes []uint64) {
	for _, h := range hashes {
		if seq.stopped {
			return
		}
		i, ok := c.byHash[h]
		if ok {
			c.pin(i)
		} else if i = c.alloc(); i != 0 {
			c.blocks[i].hash, c.blocks[i].hashed = h, true
			c.byHash[h] = i
		} else {
			seq.stopped = true
			return
		}
		seq.held = append(seq.held, i)
	}
}

// alloc takes a slot, held once: a spare one, a new one below capacity, or
// the least recently used free block's, evicting it. It returns 0 when
// every block is held. The caller holds c.mu.
func (c *prefixCache) alloc() int32 {
	if n := len(c.spare); n > 0 {
		i := c.spare[n-1]
		c.spare = c.spare[:n-1]
		c.blocks[i] = kvBlock{refs: 1}
		return i
	}
	if len(c.blocks)-1 < c.capacity {
		c.blocks = append(c.blocks, kvBlock{refs: 1})
		return int32(len(c.blocks) - 1)
	}
	if c.free == 0 {
		return 0
	}
	i := c.blocks[0].next
	c.unlink(i)
	delete(c.byHash, c.blocks[i].hash)
	c.blocks[i] = kvBlock{refs: 1}
	return i
}

// pin holds block i once more, taking it off the free list if it was
// free. The caller holds c.mu.
func (c *prefixCache) pin(i int32) {
	if c.blocks[i].refs == 0 {
		c.unlink(i)
	}
	c.blocks[i].refs++
}

// unpin releases a hold on block i: a cached block no one holds goes to the
// most recently used end of the free list, a partial one to the spares.
// The caller holds c.mu.
func (c *prefixCache) unpin(i int32) {
	b := &c.blocks[i]
	if b.refs--; b.refs > 0 {
		return
	}
	if !b.hashed {
		c.spare = append(c.spare, i)
		return
	}
	last := c.blocks[0].prev
	b.prev, b.next = last, 0
	c.blocks[last].next, c.blocks[0].prev = i, i
	c.free++
}

// unlink takes free block i off the free list. The caller holds c.mu.
func (c *prefixCache) unlink(i int32) {
	b := &c.blocks[i]
	c.blocks[b.prev].next, c.blocks[b.next].prev = b.next, b.prev
	c.free--
}

// usedLocked is the number of blocks running requests hold. The caller
// holds c.mu.
func (c *prefixCache) usedLocked() int {
	return len(c.blocks) - 1 - len(c.spare) - c.free
}
