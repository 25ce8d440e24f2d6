#include <gtest/gtest.h>

#include <set>
#include <stdexcept>

#include "comm/parallel_layout.h"

using adakv::comm::LayerRange;
using adakv::comm::ParallelLayout;
using adakv::comm::stage_layers;
using adakv::comm::World;

TEST(ParallelLayout, TpIsWhatPpAndDpLeave) {
  const auto l = ParallelLayout::from_world(6, 2, 1);
  EXPECT_EQ(l.tp, 3);
  EXPECT_EQ(l.pp, 2);
  EXPECT_EQ(l.dp, 1);
  EXPECT_EQ(ParallelLayout::from_world(16, 2, 1).tp, 8);
  EXPECT_EQ(ParallelLayout::from_world(16, 1, 2).tp, 8);
  EXPECT_EQ(l.describe(), "TP 3 x PP 2 x DP 1 (6 ranks)");
}

TEST(ParallelLayout, RefusesSizesThatDoNotDivideTheRanks) {
  try {
    ParallelLayout::from_world(6, 4, 1);
    FAIL() << "6 ranks into 4 stages was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("must divide"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ParallelLayout::from_world(4, 0, 1), std::invalid_argument);
  EXPECT_THROW(ParallelLayout::from_world(4, 1, -1), std::invalid_argument);
}

TEST(ParallelLayout, TpIsFastestThenPpThenDp) {
  const auto l = ParallelLayout::from_world(12, 2, 2);  // TP 3
  std::set<std::tuple<int, int, int>> seen;
  for (int rank = 0; rank < 12; ++rank) {
    World w;
    w.rank = rank;
    w = l.place(w);
    EXPECT_EQ(w.tp_size, 3);
    EXPECT_EQ(l.rank_of(w.dp_rank, w.pp_rank, w.tp_rank), rank);
    seen.insert({w.dp_rank, w.pp_rank, w.tp_rank});
  }
  EXPECT_EQ(seen.size(), 12u);
  World w;
  w.rank = 7;  // dp 1, pp 0, tp 1
  w = l.place(w);
  EXPECT_EQ(w.dp_rank, 1);
  EXPECT_EQ(w.pp_rank, 0);
  EXPECT_EQ(w.tp_rank, 1);
  EXPECT_TRUE(w.is_first_stage());
  EXPECT_FALSE(w.is_last_stage());
  w.rank = 12;
  EXPECT_THROW(l.place(w), std::invalid_argument);
}

TEST(ParallelLayout, StagesTakeContiguousLayersEarlierOnesOneMore) {
  EXPECT_EQ(stage_layers(30, 2, 0), (LayerRange{0, 15}));
  EXPECT_EQ(stage_layers(30, 2, 1), (LayerRange{15, 30}));
  EXPECT_EQ(stage_layers(7, 3, 0), (LayerRange{0, 3}));
  EXPECT_EQ(stage_layers(7, 3, 1), (LayerRange{3, 5}));
  EXPECT_EQ(stage_layers(7, 3, 2), (LayerRange{5, 7}));
  EXPECT_THROW(stage_layers(2, 3, 0), std::invalid_argument);
  EXPECT_THROW(stage_layers(8, 2, 2), std::invalid_argument);
}
