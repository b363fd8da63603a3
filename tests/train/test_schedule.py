import math

import pytest
import torch

from asr.train.schedule import WarmupSchedule, build_scheduler


def test_noam_peaks_at_warmup_then_decays_as_inverse_sqrt():
    s = WarmupSchedule("noam", warmup_steps=100)
    assert s(0) == pytest.approx(1 / 100)
    assert s(99) == pytest.approx(1.0)
    assert s(399) == pytest.approx(math.sqrt(100 / 400))
    assert all(s(i) < s(i + 1) for i in range(99))


def test_cosine_reaches_min_ratio_after_the_last_update_and_stays():
    s = WarmupSchedule("cosine", warmup_steps=10, total_steps=110, min_lr_ratio=0.1)
    assert s(9) == pytest.approx(1.0)
    # update n has progress (n + 1 - 10) / 101
    assert s(59) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 50 / 101)))
    assert s(109) > 0.1 + 1e-4  # the last of the 110 updates still has a learning rate above the floor
    assert s(109) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 100 / 101)))
    assert s(110) == pytest.approx(0.1)
    assert s(500) == pytest.approx(0.1)
    assert all(s(i) > s(i + 1) for i in range(9, 110))


def test_bad_settings_raise_with_values():
    with pytest.raises(ValueError, match="'linear'"):
        WarmupSchedule("linear")
    with pytest.raises(ValueError, match=r"total_steps \(None\)"):
        WarmupSchedule("cosine", warmup_steps=10)


def test_scheduler_state_round_trips():
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.AdamW([p], lr=1.0)
    sched = build_scheduler(opt, "noam", 4, None, 0.0)
    for _ in range(6):
        opt.step()
        sched.step()
    opt2 = torch.optim.AdamW([p], lr=1.0)
    sched2 = build_scheduler(opt2, "noam", 1000, None, 0.0)
    sched2.load_state_dict(sched.state_dict())
    assert sched2.lr_lambdas[0].warmup_steps == 4
    assert sched2.get_last_lr() == pytest.approx(sched.get_last_lr())


def test_a_warmup_the_run_never_finishes_is_refused_before_anything_is_built():
    from asr.train.config import SchedulerConfig
    from asr.train.schedule import check_schedule

    with pytest.raises(ValueError, match=r"warmup_steps \(300\) does not fit the run's 4 optimizer steps "
                                         r"\(trainer.max_steps\).*set optim.scheduler.warmup_steps=0"):
        check_schedule(SchedulerConfig("cosine", warmup_steps=300), max_steps=4)
    with pytest.raises(ValueError, match=r"\(optim.scheduler.total_steps\).*never reach its peak"):
        check_schedule(SchedulerConfig("noam", warmup_steps=300, total_steps=200), max_steps=4000)
    check_schedule(SchedulerConfig("noam", warmup_steps=4), max_steps=4)  # the last step at the peak
    check_schedule(SchedulerConfig("cosine", warmup_steps=3), max_steps=4)
    check_schedule(SchedulerConfig("cosine", warmup_steps=300), max_steps=-1)  # epochs: counted later


def test_a_shortened_cosine_keeps_the_next_rate_and_ends_at_the_floor_on_its_new_last_update():
    s = WarmupSchedule("cosine", warmup_steps=10, total_steps=110, min_lr_ratio=0.1)
    next_rate = s(40)
    s.move_end(40, 70)  # 40 updates taken, the cosine now ends after update 70
    assert s(40) == pytest.approx(next_rate)
    assert all(s(i) > s(i + 1) for i in range(40, 70))
    assert s(69) > 0.1 + 1e-4  # the new last update still moves the weights
    assert s(70) == pytest.approx(0.1) and s(200) == pytest.approx(0.1)
    # a second move squeezes what is left again, from where the curve then is; a third stretches it
    at_50 = s(50)
    s.move_end(50, 60)
    assert s(50) == pytest.approx(at_50) and s(60) == pytest.approx(0.1) and s(59) > 0.1 + 1e-4
    at_55 = s(55)
    s.move_end(55, 90)
    assert s(55) == pytest.approx(at_55) and s(90) == pytest.approx(0.1) and s(89) > 0.1
    assert all(s(i) > s(i + 1) for i in range(55, 90))


def test_only_a_cosine_past_its_warmup_moves_its_end_and_only_past_the_updates_taken():
    with pytest.raises(ValueError, match="only a cosine"):
        WarmupSchedule("noam", warmup_steps=10).move_end(20, 30)
    s = WarmupSchedule("cosine", warmup_steps=10, total_steps=110)
    for taken, total in ((5, 50), (40, 40), (40, 39)):
        with pytest.raises(ValueError, match="cannot end the cosine"):
            s.move_end(taken, total)


def test_a_shortened_cosine_survives_the_scheduler_state():
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.AdamW([p], lr=1.0)
    sched = build_scheduler(opt, "cosine", 4, 40, 0.0)
    for _ in range(10):
        opt.step()
        sched.step()
    sched.lr_lambdas[0].move_end(10, 20)
    resumed = build_scheduler(torch.optim.AdamW([p], lr=1.0), "cosine", 4, 40, 0.0)
    resumed.load_state_dict(sched.state_dict())
    assert resumed.lr_lambdas[0].total_steps == 20
    assert [resumed.lr_lambdas[0](i) for i in range(25)] == pytest.approx([sched.lr_lambdas[0](i) for i in range(25)])
