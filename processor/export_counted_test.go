package processor

// SetCountedRepairHook sets o's test hook: h is called at the end of each
// step of the counted repair ("R0", "R1", "R2", "R5": before R6).
func SetCountedRepairHook(o *CountedRepairOptions, h func(step string)) { o.hook = h }
